"""What the core does for each port, one module (or package) per port.

``changesets`` (the changes port), ``resources`` (the resources port and
resources clients publish), ``worktrees`` and ``terminals``. A service is built
by the host with the few collaborators it needs (the engine, the router,
``Tasks``, the port), subscribes to the lifecycle moments it cares about as an
internal plugin (``ahpcore.lifecycle``), and calls only what its port's
Protocol in ``ahpcore.ports`` declares.
"""
