#!/usr/bin/python3
"""Drives the PeerVoice app through AT-SPI, as a screen reader would: finds controls by role and
accessible name (the names the README lists), uses them, reads them back.

usage: atspi.py COMMAND ARG...   (one command per run; waits up to $ATSPI_TIMEOUT s, default 10)
  click NAME              the button, toggle button or switch NAME: its "click" action (else its first)
  field NAME              prints the text in the text field NAME (a label of that name aside)
  set-text NAME TEXT      the text field NAME now holds TEXT
  text NAME               prints the text of the label or field NAME
  pressed NAME            prints "true" or "false": is the toggle button or switch NAME on
  wait-pressed NAME B     waits until pressed NAME is B ("true"/"false")
  wait-label TEXT         waits for a label showing TEXT
  label-starting TEXT     waits for a label whose text starts with TEXT; prints that text
  wait-gone NAME          waits until no control is named NAME
  wait-row NAME           waits for a row named NAME in the list "Peers"
  select-row NAME         selects the row NAME in the list "Peers"
  wait-in-row ROW NAME    waits until the row ROW in "Peers" holds a visible control named NAME
  value NAME              prints the current value of the slider NAME
  set-value NAME V        moves the slider NAME to V (its Value interface), waits until it shows V
  sensitive NAME          prints "true" or "false"
  extents NAME            prints "X Y WIDTH HEIGHT" of NAME within its window
Exit status 0 on success, 1 when the control did not show up or the check failed (with a reason).
"""
import os, sys, time, warnings
warnings.simplefilter("ignore", DeprecationWarning)  # PyGObject flags the Atspi *_iface getters
import gi
gi.require_version("Atspi", "2.0")
from gi.repository import Atspi, GLib

TIMEOUT = float(os.environ.get("ATSPI_TIMEOUT", "10"))
APP = os.environ.get("ATSPI_APP", "peervoice")
BUTTONS = {"push button", "toggle button", "check box"}  # GTK 4.8 shows a GtkSwitch as a check box
FIELDS = {"text", "entry"}
SLIDERS = {"slider"}

def fail(reason):
    print(reason, file=sys.stderr)
    sys.exit(1)

def until(predicate, what):
    end = time.monotonic() + TIMEOUT
    while True:
        try:
            result = predicate()
        except GLib.Error:
            result = None   # the tree changed under us: look again
        if result:
            return result
        if time.monotonic() > end:
            fail("timed out after %.0f s waiting for %s" % (TIMEOUT, what))
        time.sleep(0.05)

def application():
    desktop = Atspi.get_desktop(0)
    for i in range(desktop.get_child_count()):
        child = desktop.get_child_at_index(i)
        if child is not None and child.get_name() == APP:
            return child
    return None

def walk(root):
    stack = [root]
    while stack:
        node = stack.pop()
        if node is None:
            continue
        yield node
        try:
            stack.extend(node.get_child_at_index(i) for i in reversed(range(node.get_child_count())))
        except GLib.Error:
            pass

def is_visible(node):
    return node.get_state_set().contains(Atspi.StateType.VISIBLE)

def find(name, roles=None, visible=True):
    app = application()
    if app is None:
        return None
    for node in walk(app):
        try:
            if node.get_name() != name or (roles and node.get_role_name() not in roles):
                continue
            if visible and not is_visible(node):
                continue
            return node
        except GLib.Error:
            continue
    return None

def control(name, roles=None):
    return until(lambda: find(name, roles), "%s '%s'" % ("/".join(sorted(roles)) if roles else "control", name))

def text_of(node):
    text = node.get_text_iface()
    return text.get_text(0, text.get_character_count()) if text else node.get_name()

def is_pressed(node):
    states = node.get_state_set()
    return states.contains(Atspi.StateType.PRESSED) or states.contains(Atspi.StateType.CHECKED)

def rows():
    peers = find("Peers", {"list", "list box"})
    if peers is None:
        return None, []
    return peers, [peers.get_child_at_index(i) for i in range(peers.get_child_count())]

def slider_value(node):
    return node.get_value_iface().get_current_value()

def main(command, *args):
    if command == "click":
        node = control(args[0], BUTTONS)
        until(lambda: node.get_state_set().contains(Atspi.StateType.SENSITIVE), "'%s' to be enabled" % args[0])
        action = node.get_action_iface()
        names = [action.get_action_name(i) for i in range(action.get_n_actions())]
        action.do_action(names.index("click") if "click" in names else 0)
    elif command == "set-text":
        node = control(args[0], FIELDS)
        node.get_editable_text_iface().set_text_contents(args[1])
        until(lambda: text_of(node) == args[1], "'%s' to hold the text" % args[0])
    elif command == "text":
        print(text_of(control(args[0])))
    elif command == "field":
        print(text_of(control(args[0], FIELDS)))
    elif command == "pressed":
        print("true" if is_pressed(control(args[0], BUTTONS)) else "false")
    elif command == "wait-pressed":
        node = control(args[0], BUTTONS)
        until(lambda: is_pressed(node) == (args[1] == "true"), "'%s' pressed=%s" % (args[0], args[1]))
    elif command == "wait-label":
        control(args[0], {"label"})
    elif command == "label-starting":
        def starting():
            app = application()
            for node in walk(app) if app else []:
                try:
                    name = node.get_name()
                    if node.get_role_name() == "label" and name.startswith(args[0]) \
                            and node.get_state_set().contains(Atspi.StateType.VISIBLE):
                        return name
                except GLib.Error:
                    continue
            return None
        print(until(starting, "a label starting with '%s'" % args[0]))
    elif command == "wait-gone":
        until(lambda: find(args[0]) is None, "'%s' to go away" % args[0])
    elif command == "wait-row":
        until(lambda: any(r.get_name() == args[0] for r in rows()[1]), "row '%s' in Peers" % args[0])
    elif command == "select-row":
        def select():
            peers, items = rows()
            for index, row in enumerate(items):
                if row.get_name() == args[0]:
                    return peers.get_selection_iface().select_child(index) or True
            return None
        until(select, "row '%s' in Peers" % args[0])
    elif command == "wait-in-row":
        def holds():
            for row in rows()[1]:
                if row.get_name() == args[0]:
                    return any(node is not row and node.get_name() == args[1] and is_visible(node) for node in walk(row))
            return False
        until(holds, "'%s' in row '%s'" % (args[1], args[0]))
    elif command == "value":
        print("%g" % slider_value(control(args[0], SLIDERS)))
    elif command == "set-value":
        node = control(args[0], SLIDERS)
        until(lambda: node.get_state_set().contains(Atspi.StateType.SENSITIVE), "'%s' to be enabled" % args[0])
        node.get_value_iface().set_current_value(float(args[1]))
        until(lambda: slider_value(node) == float(args[1]), "'%s' to show %s" % (args[0], args[1]))
    elif command == "sensitive":
        print("true" if control(args[0]).get_state_set().contains(Atspi.StateType.SENSITIVE) else "false")
    elif command == "extents":
        box = control(args[0]).get_component_iface().get_extents(Atspi.CoordType.WINDOW)
        print(box.x, box.y, box.width, box.height)
    else:
        fail("unknown command " + command)

if __name__ == "__main__":
    if len(sys.argv) < 2:
        fail(__doc__)
    main(*sys.argv[1:])
