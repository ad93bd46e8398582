"""The inspector: ``ahp serve --inspector`` serves a read-only page at ``/inspect``.

The page (``static/``) is a client of the host like any other: it connects over
the WebSocket with the token, subscribes to the root channel and to the open
sessions and chats, and asks ``ahp/inspect`` (``figures``) for what only the
host knows. ``page`` builds the document the WebSocket transport serves.
"""
