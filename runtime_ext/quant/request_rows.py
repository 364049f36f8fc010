"""Per-request fallback (``quant.monitor.granularity: request``) in the scheduler (imports torch).

A request whose activations trip the monitor finishes its remaining tokens in high precision.
The other requests in the same batch keep the quantized path. ``RequestRows`` does this per
forward:
- ``begin(forward_batch)``: which request owns each row. An extend batch gives
  ``extend_seq_lens_cpu`` rows per request; a decode batch gives one row each.
- ``prepare``, at the first ``observe`` of the step: the row → request index on the device and
  the mask of the rows of flagged requests.
- ``count``, at the step's end: the ``[modules, rows]`` outlier flags summed per request
  (``index_add_``) and read once.
- ``end``: adds each request's tokens and outliers to its ``RequestTally``, and flags the
  requests ``decide_request`` names.
``mixed_rows`` is what ``apply`` does with the mask: the flagged rows are recomputed with the
module's standby weight.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch

from runtime_ext.quant.monitor import MonitorConfig, RequestTally, decide_request

_REMEMBERED = 65536  # request tallies and flags kept (oldest dropped first)


def mixed_rows(y: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: Any, mask: torch.Tensor) -> torch.Tensor:
    """``y`` (the quantized path's output) with the ``mask`` rows replaced by ``x @ weight.T``."""
    y[mask] = torch.nn.functional.linear(x[mask], weight, bias).to(y.dtype)
    return y


class RequestRows:
    def __init__(self, config: MonitorConfig) -> None:
        self.config = config
        self.tallies: OrderedDict[str, RequestTally] = OrderedDict()
        self.flagged: OrderedDict[str, str] = OrderedDict()  # rid -> the module that tripped
        self.rids: list[str] = []
        self.lens: list[int] = []
        self.rows: torch.Tensor | None = None
        self.mask: torch.Tensor | None = None
        self.table: dict[str, list[float]] = {}  # module -> outliers per request, this step

    def begin(self, forward_batch: Any) -> None:
        rids = list(getattr(forward_batch, "rids", None) or [])
        mode = getattr(forward_batch, "forward_mode", None)
        extend = mode is not None and mode.is_extend()
        lens = list(getattr(forward_batch, "extend_seq_lens_cpu", None) or []) if extend else [1] * len(rids)
        self.rids, self.lens = (rids, lens) if len(lens) == len(rids) else ([], [])
        self.rows = self.mask = None
        self.table = {}

    def prepare(self, device: torch.device) -> None:
        if self.rows is not None or not self.rids:
            return
        owners = torch.arange(len(self.rids), device=device)
        self.rows = torch.repeat_interleave(owners, torch.tensor(self.lens, device=device))
        hit = [i for i, rid in enumerate(self.rids) if rid in self.flagged]
        self.mask = torch.isin(self.rows, torch.tensor(hit, device=device)) if hit else None

    def count(self, names: list[str], outliers: torch.Tensor) -> None:
        """``outliers``: the per-row flags of the modules ``names`` (bool ``[modules, rows]``)."""
        if self.rows is None or self.rows.numel() != outliers.shape[1]:
            return
        per_request = torch.zeros(len(names), len(self.rids), device=outliers.device)
        per_request.index_add_(1, self.rows, outliers.float())
        self.table.update(zip(names, per_request.tolist()))

    def row_mask(self, rows: int) -> torch.Tensor | None:
        """The flagged requests' rows for an input of ``rows`` rows (None: none, or a padded batch)."""
        mask = self.mask
        return mask if mask is not None and mask.numel() == rows else None

    def end(self) -> list[tuple[str, str, float, int]]:
        """The requests flagged by this step: ``(rid, module, rate, tokens)``."""
        if not self.table:
            return []
        newly = []
        for i, rid in enumerate(self.rids):
            tally = self.tallies.setdefault(rid, RequestTally())
            self.tallies.move_to_end(rid)
            tally.add(self.lens[i], {name: int(row[i]) for name, row in self.table.items() if row[i]})
            if rid not in self.flagged and (hit := decide_request(tally, self.config)) is not None:
                self.flagged[rid] = hit[0]
                newly.append((rid, hit[0], hit[1], tally.tokens))
        for kept in (self.tallies, self.flagged):
            while len(kept) > _REMEMBERED:
                kept.popitem(last=False)
        return newly
