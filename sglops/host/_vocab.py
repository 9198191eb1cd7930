# The served model's token space, for prompts sent as input_ids (`from ._vocab import draw_prompt_ids`).
# SGLang does not validate input_ids: an id at or above the vocabulary size makes the embedding lookup raise
# (IndexError) and the server dies. So prompt ids are drawn below the model's vocabulary (read from its
# config.json and tokenizer files, where the server loads them from) and never a special token (bos, eos, pad,
# anything the tokenizer marks special).
import glob
import json
import os
import random

from ._common import UserError

# 16,777,216 ids: past any model's vocabulary (--vocab-size has the same bound)
MAX_VOCAB = 1 << 24
_CONFIG_ID_KEYS = (
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "decoder_start_token_id",
    "unk_token_id",
    "sep_token_id",
    "cls_token_id",
    "mask_token_id",
)


def _vget(url, timeout=5.0):
    """(status, body) of a GET on the host's own server; (None, reason) when nothing answers. Own helper: a
    script that imports http.client shadows _common's `http` function with the module."""
    from urllib.parse import urlsplit

    from . import _fetch

    try:
        parts = urlsplit(url)
        status, body = _fetch.get(parts.port, parts.path, timeout=timeout, host=parts.hostname)
        return status, body.decode(errors="replace") if status == 200 else ""
    # any failure to read is "no answer": OSError, HTTPException, TooLarge
    except Exception as exc:  # noqa: BLE001
        return None, str(exc) or type(exc).__name__


def _vread(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _hf_snapshot(repo_id, env=None):
    """A hub id's newest snapshot folder in the Hugging Face cache on this host (where the server loaded it;
    `env`: the server process's environment, whose HF_HOME / HF_HUB_CACHE win)."""
    env = env or os.environ
    hub = env.get("HF_HUB_CACHE") or os.path.join(
        env.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface"), "hub"
    )
    pattern = os.path.join(hub, "models--" + repo_id.replace("/", "--"), "snapshots", "*", "config.json")
    found = sorted(glob.glob(pattern), key=os.path.getmtime)
    return os.path.dirname(found[-1]) if found else None


def model_dir(path, env=None):
    """The folder holding the model's config.json: the path itself, else the hub cache's snapshot."""
    if not path:
        return None
    path = os.path.expanduser(path)
    if os.path.isfile(os.path.join(path, "config.json")):
        return path
    if not os.path.isabs(path) and path.count("/") == 1:
        return _hf_snapshot(path, env)
    return None


def _ids(value):
    if isinstance(value, int) and not isinstance(value, bool):
        return {value}
    if isinstance(value, list):
        return {v for v in value if isinstance(v, int) and not isinstance(v, bool)}
    return set()


def _config_vocab(config):
    """vocab_size of the model, also where multimodal configs nest it (text_config, llm_config, ...)."""
    if not isinstance(config, dict):
        return None
    if isinstance(config.get("vocab_size"), int):
        return config["vocab_size"]
    for key in ("text_config", "llm_config", "language_config", "thinker_config"):
        inner = _config_vocab(config.get(key))
        if inner:
            return inner
    return None


def read_token_space(folder, tokenizer_folder=None):
    """(vocab size or None, special ids, what was read) from
    a model folder's files, without importing anything."""
    special, read = set(), []
    config = _vread(os.path.join(folder, "config.json")) if folder else None
    vocab = _config_vocab(config)
    if config is not None:
        read.append("config.json")
        for key in _CONFIG_ID_KEYS:
            special |= _ids(config.get(key))
            special |= _ids((config.get("text_config") or {}).get(key))
    gen = _vread(os.path.join(folder, "generation_config.json")) if folder else None
    if isinstance(gen, dict):
        read.append("generation_config.json")
        for key in _CONFIG_ID_KEYS:
            special |= _ids(gen.get(key))
    tok_dir = tokenizer_folder or folder
    tok_vocab = None
    tok = _vread(os.path.join(tok_dir, "tokenizer.json")) if tok_dir else None
    if isinstance(tok, dict):
        read.append("tokenizer.json")
        base = (tok.get("model") or {}).get("vocab")
        if isinstance(base, (dict, list)) and base:
            # the tokenizer's own vocabulary, added tokens not counted (HF's vocab_size)
            tok_vocab = len(base)
        for added in tok.get("added_tokens") or []:
            if added.get("special") and isinstance(added.get("id"), int):
                special.add(added["id"])
    tcfg = _vread(os.path.join(tok_dir, "tokenizer_config.json")) if tok_dir else None
    if isinstance(tcfg, dict):
        read.append("tokenizer_config.json")
        for key, entry in (tcfg.get("added_tokens_decoder") or {}).items():
            if isinstance(entry, dict) and entry.get("special") and str(key).isdigit():
                special.add(int(key))
    sizes = [v for v in (vocab, tok_vocab) if v]
    return (min(sizes) if sizes else None), special, read


def model_token_space(base_url, info=None, vocab_size=None, env=None):
    """Where prompt ids may come from for the server at base_url: {"high", "special", "model_dir", "source"}.

    `info` is the server's /server_info answer when the caller has it (model_path, tokenizer_path);
    otherwise /model_info is asked. `vocab_size` (the operator's --vocab-size) wins over the files. `env`:
    the server process's HF_HOME / HF_HUB_CACHE, when it loads hub ids from a cache of its own.
    """
    info = dict(info or {})
    asked = False

    def ask():
        for path in ("/model_info", "/get_model_info"):
            status, text = _vget(base_url + path)
            if status == 200:
                try:
                    answer = json.loads(text)
                except (ValueError, RecursionError):
                    continue
                if isinstance(answer, dict):
                    return answer
        return _openai_model()

    def _openai_model():
        """An OpenAI-style server with no /model_info (vLLM) names its model in /v1/models: `root` is the path
        it loaded (vLLM), else `id`."""
        status, text = _vget(base_url + "/v1/models")
        try:
            models = json.loads(text).get("data") if status == 200 else None
        except (ValueError, RecursionError, AttributeError):
            models = None
        for m in models if isinstance(models, list) else []:
            path = m.get("root") or m.get("id") if isinstance(m, dict) else None
            if isinstance(path, str):
                return {"model_path": path}
        return {}

    if not info.get("model_path"):
        info = {**ask(), **info}
        asked = True
    model_path = info.get("model_path") if isinstance(info.get("model_path"), str) else None
    tok_path = info.get("tokenizer_path") if isinstance(info.get("tokenizer_path"), str) else None
    folder = model_dir(model_path, env)
    tok_folder = model_dir(tok_path, env) if tok_path else None
    vocab, special, read = read_token_space(folder, tok_folder) if folder else (None, set(), [])
    source = f"{folder} ({', '.join(read)})" if folder else None
    # a server that reports its vocabulary (SGLang does not; our stand-in does) is taken at its word
    if not vocab:
        reported = info.get("vocab_size") or (None if asked else ask().get("vocab_size"))
        if isinstance(reported, int) and not isinstance(reported, bool) and 0 < reported <= MAX_VOCAB:
            vocab, source = reported, "the server's /model_info vocab_size"
    if vocab_size:
        vocab, source = int(vocab_size), f"--vocab-size {int(vocab_size)}"
    if not vocab:
        where = (
            f"no config.json at {model_path!r} on this host"
            if model_path
            else "the server named no model path"
        )
        raise UserError(
            f"cannot tell the served model's vocabulary ({where}), so no safe prompt token ids; "
            "pass --vocab-size N"
        )
    if not isinstance(vocab, int) or vocab > MAX_VOCAB:
        raise UserError(
            f"the model's vocabulary size {str(vocab)[:40]} (from {source}) is past any model's "
            f"({MAX_VOCAB}); pass --vocab-size N"
        )
    special = sorted(i for i in special if isinstance(i, int) and 0 <= i < vocab)
    if vocab - len(special) < 2:
        raise UserError(f"the model's vocabulary ({vocab}) has no ordinary token ids to build prompts from")
    return {"high": vocab, "special": special, "model_dir": folder, "source": source}


def draw_prompt_ids(space, seed, n):
    """n random ordinary token ids of the model (seeded: the same prompt every run), never a special one."""
    rng = random.Random(seed)
    high, special = space["high"], set(space["special"])
    out = []
    while len(out) < n:
        i = rng.randrange(high)
        if i not in special:
            out.append(i)
    return out
