"""The one door to transformers', datasets' and torch's internals.

Every name tdos uses that is not a library's documented API (a leading underscore, or a
function of an internal module such as transformers.core_model_loading) is listed in
`PRIVATE` and touched only here, by the small functions below; the rest of tdos calls those.
A new release that renames or drops one fails tests/test_hf_door.py with one line per name,
instead of the worker's self-check at run time; tests/test_hf_door.py also checks that no
other module in sweep/, analysis/ or cluster/ imports or reads these names.

Where a public API does the job it is used instead (and not listed): `get_experts_implementation`
for the MoE kernel choice, `register_parameter`/`setattr`, `named_parameters(recurse=False)`
for parameter slots, config attributes for what a layer is.
"""
from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

# The releases every entry of PRIVATE was tested on (requirements.lock); a new lock moves
# them after tests/test_hf_door.py passes on it.
TESTED = {"transformers": "5.25.0", "datasets": "5.2.0", "torch": "2.13.0"}


@dataclass(frozen=True)
class Private:
    """One private name: its dotted path (module path, then attributes), what it does for
    tdos, and the attribute name other modules must not read (its last segment)."""

    name: str
    does: str

    @property
    def attribute(self) -> str:
        return self.name.rsplit(".", 1)[-1]


PRIVATE = (
    Private("transformers.PreTrainedModel._init_weights",
            "one module's own init: a random_init null module by module under its own seed, and "
            "the computed buffers of a model built on meta (initialize_weights runs the whole "
            "tree, skips modules it flagged and cannot seed per module)"),
    Private("transformers.GenerationMixin._supports_default_dynamic_cache",
            "whether generate() hands this model a fresh DynamicCache (decode.py does the same)"),
    Private("transformers.conversion_mapping.get_model_conversion_mapping",
            "the model's checkpoint renamings and converters, as from_pretrained applies them"),
    Private("transformers.core_model_loading.WeightRenaming",
            "tells a renaming from a converter in that mapping"),
    Private("transformers.core_model_loading.rename_source_key",
            "checkpoint key -> the model's key, as from_pretrained maps it"),
    Private("transformers.core_model_loading.convert_and_load_state_dict_in_model",
            "from_pretrained's loader, run on one layer's tensors (fused MoE experts)"),
    Private("transformers.modeling_utils.LoadStateDictConfig",
            "the options of that loader (dtype, device, conversion mapping)"),
    Private("transformers.models.mamba2.modeling_mamba2.mamba2_selective_state_update.kernel_layer_name",
            "the drop-in kernel a module-level op of a modeling file stands for (ssm.py "
            "intercepts the Mamba / delta-rule ops by it)"),
    Private("transformers.modeling_gguf_pytorch_utils.load_gguf_checkpoint",
            "a GGUF's metadata read as transformers reads it (its config and tokenizer keys, the "
            "architecture it refuses), without its tensors"),
    Private("transformers.modeling_gguf_pytorch_utils.TENSOR_PROCESSORS",
            "the per-architecture undoing of llama.cpp's layout changes (q/k row order, -exp(A), "
            "transposes), applied here to one GGUF tensor at a time"),
    Private("transformers.modeling_gguf_pytorch_utils.TensorProcessor",
            "the processor of an architecture that changes no tensor"),
    Private("transformers.modeling_gguf_pytorch_utils.get_gguf_hf_weights_map",
            "GGUF tensor name -> the model's key, as from_pretrained(gguf_file=...) maps them"),
    Private("transformers.integrations.gguf.reader._read_metadata",
            "a GGUF's metadata with its string arrays counted, not read (a 49k-token vocabulary "
            "parsed by gguf.GGUFReader costs a worker 160 MB): what a worker reads of the file"),
    Private("transformers.integrations.gguf.reader._read_tensor_table",
            "a GGUF's tensor table: name, shape (torch order), ggml type and offset of every tensor"),
    Private("transformers.integrations.gguf.is_gguf_arch_supported",
            "whether transformers loads a GGUF architecture through its packed-block loader "
            "(then a worker loads it whole) instead of the per-tensor one read layer-locally"),
    Private("transformers.quantizers.base.HfQuantizer.remove_quantization_config",
            "drops the GGUF quantizer a model loaded tensor by tensor keeps after every tensor was "
            "dequantized, as transformers does itself after its packed loader dequantized: "
            "save_pretrained refuses a model that still has it (export-null of a GGUF's null)"),
    Private("datasets.Dataset._fingerprint",
            "a save_to_disk dataset's content hash, recorded as the inputs' identity"),
    Private("datasets.DatasetBuilder._get_dataset_fingerprint",
            "a builder's split hash (data files, hub), recorded as the inputs' identity"),
    Private("torch.Tensor._version",
            "a tensor's in-place version counter: prefix.py asserts a cache was not touched"),
    Private("torch.Tensor._base",
            "the tensor a view was taken of: a view of a weight is not copied for autograd"),
)
PRIVATE_ATTRIBUTES = frozenset(p.attribute for p in PRIVATE)


def _sample_dataset():
    import datasets
    return datasets.Dataset.from_dict({"x": [0]})


# instance attributes: looked up on a small object of the class, not on the class
_INSTANCE = {"datasets.Dataset._fingerprint": _sample_dataset}


def resolve(entry: Private):
    """The object `entry.name` names on the installed releases; raises (ImportError,
    AttributeError) when it is gone."""
    if entry.name in _INSTANCE:
        return getattr(_INSTANCE[entry.name](), entry.attribute)
    parts = entry.name.split(".")
    i = len(parts)
    while True:          # the longest importable module path, then attributes
        try:
            obj = importlib.import_module(".".join(parts[:i]))
            break
        except ModuleNotFoundError:
            i -= 1
            if i == 0:
                raise
    for attr in parts[i:]:
        obj = getattr(obj, attr)
    return obj


# ---- models ---------------------------------------------------------------------------------
def init_module(model, module) -> None:
    """`module`'s own parameters and buffers set by `model`'s init for it (children not
    visited), whatever it was flagged: the caller seeds the RNG per module."""
    model._init_weights(module)


def default_dynamic_cache(model) -> bool:
    """Whether generate() would build a DynamicCache for `model`."""
    return model._supports_default_dynamic_cache()


def checkpoint_renamer(model):
    """key -> (model key, converted): a checkpoint key as from_pretrained maps it (renamings,
    the base-model prefix), `converted` when a converter builds the model's tensor from it."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightRenaming, rename_source_key

    prefix = model.base_model_prefix
    transforms = get_model_conversion_mapping(model)
    renames = [t for t in transforms if isinstance(t, WeightRenaming)]
    converters = [t for t in transforms if not isinstance(t, WeightRenaming)]
    return lambda key, expected: rename_source_key(key, renames, converters, prefix, expected)


def load_converted(model, state: dict, dtype, device) -> None:
    """The checkpoint tensors `state` (name -> tensor) loaded into `model` by from_pretrained's
    own loader with the model's conversion mapping (fused experts built from their parts)."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import convert_and_load_state_dict_in_model
    from transformers.modeling_utils import LoadStateDictConfig

    config = LoadStateDictConfig(dtype=dtype, device_map={"": str(device)},
                                 weight_mapping=get_model_conversion_mapping(model))
    convert_and_load_state_dict_in_model(model, state, config)


def kernel_name(fn) -> str | None:
    """The drop-in kernel a modeling file's module-level op declares it stands for (a
    kernels `Func` carries it since transformers 5.25; before, the function's own name)."""
    return getattr(fn, "kernel_layer_name", None) or getattr(fn, "__name__", None)


def module_functions(layer) -> list[tuple]:
    """(module, name, value) of every module-level global of the modeling files `layer`'s
    classes come from: where transformers' Mamba-style ops live, replaceable by setattr."""
    modules = {sys.modules[type(m).__module__] for m in layer.modules()}
    return [(mod, name, value) for mod in modules for name, value in list(vars(mod).items())]


# ---- GGUF files -----------------------------------------------------------------------------
def gguf_metadata(path) -> dict:
    """{"config": {...}, "tokenizer": {...}, ...}: the GGUF's metadata as transformers parses
    it; raises ValueError for an architecture its GGUF loader does not support."""
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    return load_gguf_checkpoint(str(path), return_tensors=False)


def gguf_table(path) -> tuple[dict, list[tuple], int]:
    """(metadata, [(name, shape, ggml type, offset), ...], where the tensor data begins) of GGUF
    file `path`, read by transformers' own GGUF reader; string arrays (vocabulary, merges) are
    counted, not read. Raises (ValueError, struct.error, ...) for a file it cannot parse."""
    import numpy as np
    from transformers.integrations.gguf.reader import _read_metadata, _read_tensor_table

    blob = np.memmap(str(path), mode="r", dtype=np.uint8)
    metadata, count, pos = _read_metadata(blob, str(path))
    entries, pos = _read_tensor_table(blob, count, pos)
    align = metadata.get("general.alignment", 32)      # the GGUF format's default
    return metadata, entries, (pos + align - 1) // align * align


def gguf_packed_loader(gguf_arch: str) -> bool:
    """Whether transformers loads GGUF architecture `gguf_arch` through its packed-block
    loader rather than tensor by tensor."""
    from transformers.integrations.gguf import is_gguf_arch_supported

    return is_gguf_arch_supported(gguf_arch)


def gguf_processor(gguf_arch: str, config: dict):
    """transformers' tensor processor of GGUF architecture `gguf_arch` (`config`: the config
    dict gguf_metadata gives)."""
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, TensorProcessor

    return TENSOR_PROCESSORS.get(gguf_arch, TensorProcessor)(config=config)


def gguf_names(model, processor) -> dict[str, str]:
    """{GGUF tensor name: `model`'s key}, as from_pretrained(gguf_file=...) maps them."""
    from transformers.modeling_gguf_pytorch_utils import get_gguf_hf_weights_map

    return get_gguf_hf_weights_map(model, processor)


def gguf_process(processor, weights, name: str, names: dict[str, str], into: dict) -> None:
    """One dequantized GGUF tensor `weights` (ndarray) of GGUF name `name`, its layout undone by
    `processor` as from_pretrained does it, put into `into` under the model's key (`names`:
    gguf_names). A processor that fuses tensors (MoE experts) fills `into` itself."""
    import numpy as np
    import torch

    parsed = {"tensors": into}
    out = processor.process(weights=weights, name=name, tensor_key_mapping=names,
                            parsed_parameters=parsed)
    if out.name is not None and out.name in names:
        into[names[out.name]] = torch.from_numpy(np.copy(out.weights))


# ---- datasets -------------------------------------------------------------------------------
def dataset_fingerprint(ds) -> str:
    """A datasets.Dataset's content hash."""
    return ds._fingerprint


def builder_fingerprint(builder, split: str) -> str:
    """A DatasetBuilder's hash of split `split`."""
    return builder._get_dataset_fingerprint(split)


def drop_gguf_quantizer(model) -> None:
    """`model` (loaded from a GGUF file, every tensor dequantized) without transformers' GGUF
    quantizer, so that save_pretrained writes it as an ordinary checkpoint; ValueError when a
    tensor is still packed (not floating point). A model without one is left as it is."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is None:
        return
    packed = [n for n, p in model.named_parameters() if not p.is_floating_point()]
    if packed:
        raise ValueError(f"{packed[0]} is still packed ({len(packed)} tensors): not a dequantized model")
    quantizer.remove_quantization_config(model)


# ---- objects and tensors (prefix.py's copies of a cache and of module-held state) ------------
def attributes(obj) -> dict:
    """`obj`'s own attribute dict, live (writes to it set or delete attributes without
    nn.Module's __setattr__/__delattr__)."""
    return vars(obj)


def tensor_version(t) -> int:
    """`t`'s in-place version counter (grows with every in-place write)."""
    return t._version


def tensor_base(t):
    """The tensor `t` is a view of, or None."""
    return t._base
