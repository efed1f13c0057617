"""Routes: how one step's rows travel between a HetEmbedding and its table.

One interface (route.Route), one implementation a file: the table read and
written directly (direct.py), HET's cache by refresh or by check with the
lookahead on top (cached.py), and two that take some rows apart from the
cache (split.py): FAE's hot block (hot_rows.py) and Herald's plan
(herald.py). The layer looks a batch up through its route and hands the
optimizer's gradients to it; it knows no route's logic."""
from het_tf.runtime.routes.cached import CachedRoute
from het_tf.runtime.routes.direct import DirectRoute
from het_tf.runtime.routes.herald import HeraldRoute
from het_tf.runtime.routes.hot_rows import HotRowsRoute
from het_tf.runtime.routes.route import Route

__all__ = ["CachedRoute", "DirectRoute", "HeraldRoute", "HotRowsRoute", "Route"]
