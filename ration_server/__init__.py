"""The product: the composition root that knows both services. The `ration` command (up, serve,
migrate, demo) builds each service from its definition and hands it to servicekit, which knows
no service; the scripted demo runs against the stack it starts.

- `cli`: The `ration` command: `up`, `budget serve`, `memory serve`, `migrate`, `demo`.
- `demo`: `ration demo`: a scripted agent run that a budget stops, shown live from the event stream.
- `notify`: `ration notify`: the webhook alert process, built from RATION_NOTIFY_* and run until
  stopped.
- `registry`: both service definitions; the one kind → settings → factory → runner switch.
- `entry`: The `ration` console script: the Ctrl-C handler first, every other import after it.
"""

# The release, semantic versioning; CHANGELOG.md says what changed and how to upgrade.
__version__ = "0.2.0"
