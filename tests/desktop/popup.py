#!/usr/bin/python3
"""What a person sees of the notification server's popups, read through AT-SPI (run with Debian's
/usr/bin/python3, which has GI): the test clicks with xdotool at the place this reports.

  popup.py shows TEXT       waits for a label TEXT in the notification server's windows; prints
                            every label there, one per line
  popup.py button LABEL     "X Y" of the centre of the push button named LABEL, on the screen

Waits up to POPUP_TIMEOUT seconds (default 10) for what it looks for; exits 1 if it is not there.
"""
import os
import sys
import time

import gi

gi.require_version('Atspi', '2.0')
from gi.repository import Atspi  # noqa: E402

SERVER = 'notification-daemon'


def nodes():
    desktop = Atspi.get_desktop(0)
    for i in range(desktop.get_child_count()):
        app = desktop.get_child_at_index(i)
        if app is None or app.get_name() != SERVER:
            continue
        stack = [app]
        while stack:
            node = stack.pop()
            try:
                yield node
                stack.extend(node.get_child_at_index(j) for j in range(node.get_child_count()))
            except gi.repository.GLib.Error:
                continue  # a popup closed while we walked it


def texts():
    return [node.get_name() for node in nodes() if node.get_role_name() == 'label' and node.get_name()]


def button(label):
    for node in nodes():
        if node.get_role_name() == 'push button' and node.get_name() == label \
                and node.get_state_set().contains(Atspi.StateType.SHOWING):
            box = node.get_extents(Atspi.CoordType.SCREEN)
            return f'{box.x + box.width // 2} {box.y + box.height // 2}'
    return None


def main():
    deadline = time.monotonic() + float(os.environ.get('POPUP_TIMEOUT', '10'))
    while True:
        if sys.argv[1] == 'shows':
            found = texts()
            if sys.argv[2] in found:
                print('\n'.join(found))
                return 0
        elif sys.argv[1] == 'button':
            found = button(sys.argv[2])
            if found:
                print(found)
                return 0
        else:
            print(__doc__, file=sys.stderr)
            return 2
        if time.monotonic() > deadline:
            print(f'{SERVER} shows no {" ".join(sys.argv[1:])}; its labels: {texts()}', file=sys.stderr)
            return 1
        time.sleep(0.1)


if __name__ == '__main__':
    sys.exit(main())
