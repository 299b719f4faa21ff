"""fabkv for Python: a client of fabkv-server over any of its protocols, and the bench report.

    import fabkv
    with fabkv.Client("127.0.0.1:7000", protocol="pilaf") as c:
        c.set(b"k", b"v", expire=60)   # put's other name; expire: seconds from now
        c.get(b"k")        # b"v"; None when there is no such key
        c.get_many(["k", "x"])          # {"k": b"v"}: one window of requests
        value, version = c.gets("k")
        c.cas("k", b"w", version)       # True stored, False changed meanwhile, None gone
        c.delete("k")      # str keys and values are UTF-8
        c.stats()          # the server's statistics as a dict

    # Many servers, each key on its ketama server (as pylibmc and twemproxy place it):
    with fabkv.Cluster(["10.0.0.1:7000", "10.0.0.2:7000:2", "10.0.0.3:7000"]) as c:
        c.put("k", b"v")
        c.get_multi(["k", "other"])   # {"k": b"v"}
        c.server_for_key("k")         # its server's index in c.servers

fabkv.aio is the asyncio client, fabkv.pytest_plugin the fabkv_server fixture for your tests;
docs/python.md has the whole API; fabkv.report turns fabkv-bench results into plots.
"""
from ._fabkv import Client, Cluster, __version__, protocol_info, protocols
from .errors import (Contended, Error, InvalidKey, Malformed, NoSpace, ServerGone, Status,
                     TimeoutError, TooLarge, VersionMismatch)

__all__ = [
    "Client", "Cluster", "protocols", "protocol_info", "Status", "Error", "TooLarge", "InvalidKey",
    "NoSpace", "VersionMismatch", "ServerGone", "TimeoutError", "Malformed", "Contended",
    "__version__",
]
