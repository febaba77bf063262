"""The byte-level tokenizer shipped beside the demo checkpoints: id = byte value.

Saved as an ordinary tokenizer.json so that text inputs go through AutoTokenizer like any
other checkpoint's.
"""

from __future__ import annotations

from pathlib import Path


def save_byte_tokenizer(out: Path) -> None:
    """tokenizer.json + tokenizer_config.json mapping each byte to the id equal to its value.

    The GPT-2 byte-to-unicode table gives every byte a printable character; a BPE with
    those 256 characters as its vocabulary and no merges is then exactly bytes -> ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    # no special tokens: they would get ids >= 256; config.json already names 0 for pad/bos/eos
    tok = Tokenizer(models.BPE(vocab=_bytes_to_unicode(), merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(out)


def _bytes_to_unicode() -> dict[str, int]:
    """The GPT-2 table: printable characters for all 256 bytes, as {character: byte}."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars
