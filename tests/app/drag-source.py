#!/usr/bin/python3
"""A second program's window to drag files from, as a file manager offers them (GTK 4's
GtkDragSource, text/uri-list): AppTests press on it and let go over the app, XDND between two
X clients. Usage: drag-source.py PATH..."""
import sys

import gi

gi.require_version("Gdk", "4.0")
gi.require_version("Gtk", "4.0")
from gi.repository import Gdk, Gio, GLib, Gtk  # noqa: E402


def activate(app):
    window = Gtk.ApplicationWindow(application=app, title="drag-source")
    window.set_default_size(200, 100)
    label = Gtk.Label(label="files to drag")
    uris = "".join(Gio.File.new_for_path(path).get_uri() + "\r\n" for path in sys.argv[1:])
    source = Gtk.DragSource(actions=Gdk.DragAction.COPY)
    source.connect("prepare", lambda *_: Gdk.ContentProvider.new_for_bytes("text/uri-list", GLib.Bytes.new(uris.encode())))
    source.connect("drag-end", lambda *_: print("drag-end", flush=True))
    source.connect("drag-cancel", lambda _source, _drag, reason: print("drag-cancel", reason.value_nick, flush=True) or False)
    label.add_controller(source)
    window.set_child(label)
    window.present()


app = Gtk.Application(flags=Gio.ApplicationFlags.NON_UNIQUE)
app.connect("activate", activate)
app.run([sys.argv[0]])
