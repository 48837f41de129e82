"""Two CUDA cards in one box, faked for tests without a GPU: torch.cuda answers as for an RTX 3090
(cuda:0, sm_86) and an RTX 2080 Ti (cuda:1, sm_75) in CUDA_VISIBLE_DEVICES order."""

from __future__ import annotations

import pytest
import torch

CARDS = {0: ("NVIDIA GeForce RTX 3090", (8, 6)), 1: ("NVIDIA GeForce RTX 2080 Ti", (7, 5))}


def fake_two_cards(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.cuda's device queries answer for CARDS; bf16 tensors "supported" on both, as torch says
    on sm_75 (it emulates them)."""

    def index(device: object = None) -> int:
        return 0 if device is None else (torch.device(device).index or 0)  # type: ignore[arg-type]

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: CARDS[index(device)][1])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: CARDS[index(device)][0])
