"""KV pool census, read in the scheduler process (imports torch): every token slot of the pool
is either free, or held by the prefix tree (evictable or locked), or held by a running request.

At idle (no running request) ``held_by_requests`` must be 0 (else pages leaked) and so must
``tree_protected`` (a lock never released); ``tree_pages_free`` (a page both in the tree
and on the free list: a use-after-free) and ``duplicate_free_pages`` (a double free) must be 0
always. SGLang's own idle check only warns; this makes the numbers visible to tests and
``/metrics`` (``structserve_kv_pool_census{part=…}``).
"""

from __future__ import annotations

from typing import Any

import torch


def _tree_locs(tree: Any) -> torch.Tensor:
    """KV slots the prefix tree holds (SGLang's Python and Rust trees both list them; a chunk
    cache, with prefix reuse off, holds none)."""
    flatten = getattr(tree, "all_values_flatten", None)
    if flatten is None or tree.evictable_size() + tree.protected_size() == 0:
        return torch.empty(0, dtype=torch.int64)  # (SGLang's Python tree raises on an empty tree)
    values = flatten()
    return values.to(torch.int64) if isinstance(values, torch.Tensor) else torch.empty(0, dtype=torch.int64)


def census(scheduler: Any) -> dict[str, int]:
    allocator, tree = scheduler.token_to_kv_pool_allocator, scheduler.tree_cache
    total, page = int(scheduler.max_total_num_tokens), allocator.page_size
    free = int(allocator.available_size())
    evictable, protected = int(tree.evictable_size()), int(tree.protected_size())
    free_pages = allocator.get_all_free_pages().to(torch.int64)
    tree_pages = torch.unique(_tree_locs(tree) // page)
    running = getattr(scheduler, "running_batch", None)
    return {
        "total": total,
        "free": free,
        "tree_evictable": evictable,
        "tree_protected": protected,
        "held_by_requests": total - free - evictable - protected,
        "running_requests": 0 if running is None else len(running.reqs),
        "tree_pages_free": int(torch.isin(tree_pages, free_pages).sum()),
        "duplicate_free_pages": int(free_pages.numel() - torch.unique(free_pages).numel()),
    }
