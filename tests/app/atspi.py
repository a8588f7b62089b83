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
  wait NAME               waits for a control (any role) named NAME
  wait-row NAME           waits for a row named NAME in the list "Peers" or "Nearby devices"
  wait-row-in LIST NAME   waits for a row named NAME in the list LIST
  select-row NAME         selects the row NAME in "Peers" or "Nearby devices"
  wait-in-row ROW NAME    waits until the row ROW in those lists holds a visible control named NAME
  row-description NAME    prints the description of the list row NAME (in any list)
  conversation            prints the rows of the list "Conversation", one name per line, in order
  x NAME                  prints the x of the left edge of NAME within its window
  scroll NAME [V]         prints "VALUE HEIGHT PAGE" of the view around the list NAME: where it is
                          scrolled to, the content's height and the view's (at the end when
                          VALUE + PAGE = HEIGHT); with V, scrolls it to V first
  focused                 prints "ROLE NAME" of the control with the keyboard focus
  focus NAME              gives the control NAME the keyboard focus (GTK 4.8 check buttons have
                          no AT-SPI action: focus one, then press Space)
  unnamed                 prints every control a person can use (focusable, or a button, field,
                          slider, switch, row) that has no accessible name of its own (none, its
                          class name, or one name said twice), "ROLE 'NAME' (in PARENT)" per line;
                          nothing when all have one
  value NAME              prints the current value of the slider or progress bar NAME
  set-value NAME V        moves the slider NAME to V (its Value interface), waits until it shows V
  sensitive NAME          prints "true" or "false"
  extents NAME [ROLE]     prints "X Y WIDTH HEIGHT" of NAME (of ROLE, when given) within its window
  focusables              prints every control the keyboard can reach now (visible, on screen,
                          enabled, focusable), "ROLE NAME" per line in tree order; the rows of a
                          list as one line "list NAME"
  tab-walk                presses Tab (xdotool) until the focus comes back to where it was,
                          printing where each press took it, as focusables names them
  tree                    prints what a screen reader sees now: every visible node, indented by
                          depth, as "ROLE 'NAME'" (and its states focused, pressed, insensitive)
Exit status 0 on success, 1 when the control did not show up or the check failed (with a reason).
"""
import os, subprocess, sys, time, warnings
warnings.simplefilter("ignore", DeprecationWarning)  # PyGObject flags the Atspi *_iface getters
import gi
gi.require_version("Atspi", "2.0")
from gi.repository import Atspi, GLib

TIMEOUT = float(os.environ.get("ATSPI_TIMEOUT", "10"))
APP = os.environ.get("ATSPI_APP", "peervoice")
BUTTONS = {"push button", "toggle button", "check box", "radio button", "menu item"}  # GTK 4.8 shows a GtkSwitch as a check box
FIELDS = {"text", "entry"}
SLIDERS = {"slider"}
ROW_LISTS = ("Peers", "Nearby devices")
# Roles a person operates; a control of these needs a name a screen reader can say.
CONTROLS = BUTTONS | FIELDS | SLIDERS | {"list item", "combo box", "spin button", "password text", "switch", "link"}

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

def rows(lists=ROW_LISTS):
    """(list, row) for every row of the named lists, in order."""
    found = []
    for name in lists:
        box = find(name, {"list", "list box"})
        if box is not None:
            found += [(box, box.get_child_at_index(i)) for i in range(box.get_child_count())]
    return found

def row_named(name, lists=ROW_LISTS):
    return next(((box, index, row) for box, row in rows(lists) for index in [row.get_index_in_parent()]
                 if row.get_name() == name), None)

def has_own_name(node):
    """GTK names a control it has no name for after its class (GtkEntry, AdwGizmo), and reads a
    name given twice (its label and a label it is labelled by) twice ("Accept Accept")."""
    name = (node.get_name() or "").strip()
    words = name.split(" ")
    doubled = len(words) % 2 == 0 and words[:len(words) // 2] == words[len(words) // 2:]
    return name != "" and not doubled and not (name[:3] in ("Gtk", "Adw") and name[3:4].isupper() and " " not in name)

def reach_name(node):
    """A control as the keyboard reaches it: a list's rows all count as the list."""
    if node.get_role_name() == "list item":
        parent = node.get_parent()
        return "list %s" % (parent.get_name() if parent else "")
    return "%s %s" % (node.get_role_name(), node.get_name())

def focused_node():
    app = application()
    return next((n for n in walk(app) if n.get_state_set().contains(Atspi.StateType.FOCUSED)), None) if app else None

def slider_value(node):
    return node.get_value_iface().get_current_value()

def vertical_scroll_bar(list_name):
    """The vertical scroll bar of the scroll pane around the list: (its GtkRange's Value, its height)."""
    node = control(list_name, {"list", "list box"})
    while node is not None and node.get_role_name() != "scroll pane":
        node = node.get_parent()
    if node is None:
        fail("'%s' is not in a scroll pane" % list_name)
    for i in range(node.get_child_count()):
        bar = node.get_child_at_index(i)
        if bar.get_role_name() == "scroll bar" and bar.get_state_set().contains(Atspi.StateType.VERTICAL):
            # GTK 4.8: the value is on the bar's GtkRange; its maximum is the content's height.
            return bar.get_child_at_index(0).get_value_iface(), bar.get_component_iface().get_extents(Atspi.CoordType.WINDOW).height
    fail("no vertical scroll bar around '%s'" % list_name)

def main(command, *args):
    if command == "click":
        node = control(args[0], BUTTONS)
        # A GtkMenuButton is a button around the toggle button that has the action.
        node = next((n for n in walk(node) if n.get_name() == args[0] and n.get_action_iface()
                     and n.get_action_iface().get_n_actions() > 0), node)
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
    elif command == "wait":
        control(args[0])
    elif command == "wait-row":
        until(lambda: row_named(args[0]), "row '%s' in %s" % (args[0], " or ".join(ROW_LISTS)))
    elif command == "wait-row-in":
        until(lambda: row_named(args[1], (args[0],)), "row '%s' in %s" % (args[1], args[0]))
    elif command == "select-row":
        def select():
            found = row_named(args[0])
            return found and (found[0].get_selection_iface().select_child(found[1]) or True)
        until(select, "row '%s' in %s" % (args[0], " or ".join(ROW_LISTS)))
    elif command == "wait-in-row":
        def holds():
            found = row_named(args[0])
            return found and any(node is not found[2] and node.get_name() == args[1] and is_visible(node)
                                 for node in walk(found[2]))
        until(holds, "'%s' in row '%s'" % (args[1], args[0]))
    elif command == "row-description":
        print(control(args[0], {"list item"}).get_description())
    elif command == "conversation":
        box = control("Conversation", {"list", "list box"})
        for i in range(box.get_child_count()):
            print(box.get_child_at_index(i).get_name())
    elif command == "x":
        print(control(args[0]).get_component_iface().get_extents(Atspi.CoordType.WINDOW).x)
    elif command == "scroll":
        value, page = vertical_scroll_bar(args[0])
        if len(args) > 1:
            value.set_current_value(float(args[1]))
        print("%g %g %g" % (value.get_current_value(), value.get_maximum_value(), page))
    elif command == "focus":
        node = control(args[0])
        node.get_component_iface().grab_focus()
        until(lambda: node.get_state_set().contains(Atspi.StateType.FOCUSED), "'%s' to have the focus" % args[0])
    elif command == "focused":
        node = until(lambda: next((n for n in walk(application())
                                   if n.get_state_set().contains(Atspi.StateType.FOCUSED)), None), "a focused control")
        print(node.get_role_name(), node.get_name())
    elif command == "unnamed":
        app = application() or fail("no application %s" % APP)
        for node in walk(app):
            try:
                role = node.get_role_name()
                focusable = node.get_state_set().contains(Atspi.StateType.FOCUSABLE)
                # Every scroll pane says it is focusable, though Tab stops only at one whose content
                # takes no focus: AppTests' Tab walk checks the names of those it reaches.
                if (role in CONTROLS or (focusable and role not in ("scroll pane", "list", "frame", "dialog"))) \
                        and is_visible(node) and not has_own_name(node):
                    parent = node.get_parent()
                    print("%s '%s' (in %s '%s')" % (role, node.get_name(), parent.get_role_name() if parent else "",
                                                    parent.get_name() if parent else ""))
            except GLib.Error:
                continue
    elif command == "value":
        print("%g" % slider_value(control(args[0], SLIDERS | {"progress bar"})))
    elif command == "set-value":
        node = control(args[0], SLIDERS)
        until(lambda: node.get_state_set().contains(Atspi.StateType.SENSITIVE), "'%s' to be enabled" % args[0])
        node.get_value_iface().set_current_value(float(args[1]))
        until(lambda: slider_value(node) == float(args[1]), "'%s' to show %s" % (args[0], args[1]))
    elif command == "sensitive":
        print("true" if control(args[0]).get_state_set().contains(Atspi.StateType.SENSITIVE) else "false")
    elif command == "extents":
        box = control(args[0], {args[1]} if len(args) > 1 else None).get_component_iface().get_extents(Atspi.CoordType.WINDOW)
        print(box.x, box.y, box.width, box.height)
    elif command == "focusables":
        app = application() or fail("no application %s" % APP)
        printed = set()
        for node in walk(app):
            try:
                states = node.get_state_set()
                if node.get_role_name() in ("frame", "dialog") or not all(
                        states.contains(state) for state in (Atspi.StateType.FOCUSABLE, Atspi.StateType.VISIBLE,
                                                             Atspi.StateType.SHOWING, Atspi.StateType.SENSITIVE)):
                    continue
                name = reach_name(node)
                if name not in printed:
                    printed.add(name)
                    print(name)
            except GLib.Error:
                continue
    elif command == "tab-walk":
        start = until(focused_node, "a focused control")
        start_name = reach_name(start)
        previous = start_name
        for _ in range(200):
            subprocess.run(["xdotool", "key", "--clearmodifiers", "Tab"], check=True)
            # Wait for the focus to move (a lone control keeps it: then after a moment).
            end = time.monotonic() + 1
            while True:
                node = focused_node()
                name = reach_name(node) if node else ""
                if (name and name != previous) or time.monotonic() > end:
                    break
                time.sleep(0.02)
            print(name)
            if name == start_name:
                break
            previous = name
        else:
            fail("the focus never came back to %s" % start_name)
    elif command == "tree":
        def show(node, depth):
            try:
                if not is_visible(node):
                    return
                states = node.get_state_set()
                marks = [word for word, state in (("focused", Atspi.StateType.FOCUSED), ("pressed", Atspi.StateType.PRESSED),
                                                  ("checked", Atspi.StateType.CHECKED))
                         if states.contains(state)] + ([] if states.contains(Atspi.StateType.SENSITIVE) else ["insensitive"])
                print("%s%s '%s'%s" % ("  " * depth, node.get_role_name(), node.get_name(),
                                       " [" + ", ".join(marks) + "]" if marks else ""))
                for i in range(node.get_child_count()):
                    show(node.get_child_at_index(i), depth + 1)
            except GLib.Error:
                pass
        app = application() or fail("no application %s" % APP)
        for i in range(app.get_child_count()):
            show(app.get_child_at_index(i), 0)
    else:
        fail("unknown command " + command)

if __name__ == "__main__":
    if len(sys.argv) < 2:
        fail(__doc__)
    main(*sys.argv[1:])
