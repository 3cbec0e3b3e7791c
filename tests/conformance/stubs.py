"""The one list of modules the conformance suite replaces by empty stand-ins, and why.

The frameworks are installed without their dependencies (``pip install --no-deps``): the
functions the presets reproduce are plain torch, but the modules that hold them import
distributed runtimes, inference engines and model libraries at the top. Each name below is
given a stub module: any attribute is a stand-in class (subclassable, callable, falsy), so
``from X import Y`` and ``class T(Y)`` succeed; calling into a stub does nothing useful,
and none of the functions the suite calls does.

``install()`` puts the finder first on ``sys.meta_path`` (only for names not installed
for real: a real package always wins, so installing one later changes nothing here).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import sys
import types

#: top-level module -> why it is a stub (who imports it, and what for). Only the modules
#: the suite's imports reach are here (``stubbed()`` lists the ones a run used).
STUBS = {
    # distributed runtimes, inference engines and GPU kernels
    "ray": "verl (package __init__, DataProto, ray_trainer) and OpenRLHF's experience maker: "
           "the distributed runtime; no actor is started",
    "vllm": "OpenRLHF's experience maker and TRL 1.16's GRPOTrainer: the inference engine; "
            "nothing is generated",
    "deepspeed": "OpenRLHF's openrlhf.models.utils (ZeRO-3 helpers); compute_approx_kl and "
                 "compute_reward do not use it",
    "flash_attn": "OpenRLHF's models and verl's padding utilities: attention kernels (CUDA)",
    "megatron": "verl's Megatron model code, imported by its worker configs",
    "torch_npu": "verl's Ascend NPU patches",
    "nvtx": "verl's profiler (NVIDIA ranges)",
    "pynvml": "verl's rollout workers and OpenRLHF, TRL utilities: GPU monitoring",
    # model and data libraries: no model, tokenizer, dataset or Trainer is built
    "transformers": "verl's torch_functional (a tokenizer type), OpenRLHF's models, both "
                    "TRLs' trainers (the Trainer base class)",
    "accelerate": "TRL's GRPOTrainer and legacy PPOTrainer (Accelerator, gather): one process",
    "peft": "OpenRLHF's openrlhf.models and TRL: LoRA adapters",
    "datasets": "TRL's trainers (Dataset types in signatures)",
    "huggingface_hub": "TRL's trainers (model cards, hub uploads)",
    "safetensors": "legacy TRL's modeling_base and verl's model merger (checkpoint files)",
    "tensordict": "verl's torch_functional and workers (TensorDict batches); the core_algos "
                  "functions take plain tensors",
    "torchdata": "verl's trainer base (stateful data loaders)",
    "pandas": "TRL's GRPOTrainer (completion tables) and verl's utilities",
    "pyarrow": "TRL 1.16's data utilities",
    "dill": "verl's and TRL's serialisation helpers (via datasets)",
    "PIL": "verl's agent loop (images)",
    # services, logging and command lines
    "pydantic": "verl's agent loop and rollout configs (imported by ray_trainer)",
    "fastapi": "verl's rollout and reward-loop servers",
    "uvicorn": "verl's rollout and reward-loop servers",
    "aiohttp": "verl's reward-loop router, OpenRLHF's remote reward client",
    "requests": "verl's sglang rollout client",
    "urllib3": "TRL 1.16's vLLM client (HTTP retries)",
    "cachetools": "verl's rollout router",
    "codetiming": "verl's engine workers (timers)",
    "orjson": "verl's tracking logger (JSON lines)",
    "tqdm": "progress bars (OpenRLHF, TRL)",
    "rich": "legacy TRL's console callbacks",
    "tyro": "legacy TRL's PPOConfig (command-line annotations such as tyro.conf.Suppress)",
    "pylatexenc": "OpenRLHF's and verl's math reward utilities",
}


class _StubType(type):
    """The metaclass of stand-in classes: any class attribute is another stand-in."""

    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub_class(f"{cls.__name__}.{name}")

    def __add__(cls, other):
        # why: TRL's configs extend a base class's list attribute (``Base.X + [...]``)
        return other

    __radd__ = __add__

    def __getitem__(cls, item):
        # why: legacy TRL annotates config fields with ``tyro.conf.Suppress[int]``
        return cls

    def __or__(cls, other):
        return cls

    __ror__ = __or__


class _Stub(metaclass=_StubType):
    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Stub()

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Stub()

    def __bool__(self):
        return False

    def __iter__(self):
        return iter(())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _stub_class(name):
    return _StubType(name.rsplit(".", 1)[-1], (_Stub,), {"__qualname__": name})


#: the version a stub reports (module ``__version__`` and package metadata): a release new
#: enough for the frameworks' import-time version checks to take their current branch
STUB_VERSION = "5.5.3"


class _StubModule(types.ModuleType):
    __version__ = STUB_VERSION

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _stub_class(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StubDistribution(importlib.metadata.Distribution):
    def read_text(self, filename):
        return f"Name: stub\nVersion: {STUB_VERSION}\n" if filename == "METADATA" else None

    def locate_file(self, path):
        return path


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        top = fullname.split(".", 1)[0]
        if top not in STUBS or top in _REAL:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def find_distributions(self, context=None):
        # why: legacy TRL asks importlib.metadata for transformers' version at import time
        name = (getattr(context, "name", None) or "").replace("-", "_")
        if name in STUBS and name not in _REAL:
            return iter([_StubDistribution()])
        return iter(())

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


_REAL = set()


def install() -> None:
    """Stub every name of :data:`STUBS` that is not installed for real (idempotent)."""
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    for top in STUBS:
        if top not in sys.modules and importlib.util.find_spec(top) is not None:
            _REAL.add(top)
    sys.meta_path.insert(0, _Finder())


def stubbed() -> list:
    """The names of :data:`STUBS` that were imported as stubs."""
    return sorted({n.split(".", 1)[0] for n, m in sys.modules.items()
                   if isinstance(m, _StubModule)})
