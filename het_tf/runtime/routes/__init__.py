"""Routes: how one step's rows travel between a HetEmbedding and its table.

One interface (route.Route), one implementation a file: the table read and
written directly (direct.py), HET's cache by refresh or by check with the
lookahead on top (cached.py), and two that take some rows apart from the
cache (split.py): FAE's hot block (hot_rows.py) and Herald's plan
(herald.py). The layer looks a batch up through its route and hands the
optimizer's gradients to it; it knows no route's logic.

A route of one's own is registered by name, `register("name", factory)`
with `factory(table, cache)` returning a Route (`cache` is the layer's
WorkerCache, None with the cache off), and chosen by
`HetEmbedding(..., route="name")`."""
from het_tf.runtime.routes.cached import CachedRoute
from het_tf.runtime.routes.direct import DirectRoute
from het_tf.runtime.routes.herald import HeraldRoute
from het_tf.runtime.routes.hot_rows import HotRowsRoute
from het_tf.runtime.routes.route import Route

__all__ = ["CachedRoute", "DirectRoute", "HeraldRoute", "HotRowsRoute", "Route", "register",
           "registered"]

_REGISTERED = {}


def register(name, factory):
    """Makes `factory(table, cache) -> Route` the route `name` chooses."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a route is registered under a name, got {name!r}")
    if not callable(factory):
        raise ValueError(f"route {name!r}: the factory must be callable, got {factory!r}")
    _REGISTERED[name] = factory


def registered(name, owner):
    """The factory registered as `name`; `owner` names the asker in errors."""
    if name not in _REGISTERED:
        known = ", ".join(sorted(_REGISTERED)) or "none yet"
        raise ValueError(f"{owner}: no route is registered as {name!r} (registered: {known}); "
                         "register one with het_tf.runtime.routes.register(name, factory)")
    return _REGISTERED[name]
