#!/usr/bin/env python3
"""Writes a tiny random-weight llama GGUF model for the integration tests.

Architecture: llama, 2 layers, width 64, 4 heads, FFN 128, context 2048. The tokenizer is a small
SentencePiece (SPM) vocabulary: <unk>, <s>, </s>, the 256 byte tokens, single letters and common
English words (so the load generator's prompts tokenize to about one token per word). Weights are
seeded normal noise, so the model emits random tokens; with an EOS logit bias it emits exactly
max_tokens of them. About 300 KB.

usage: make-tiny-gguf.py OUT.gguf
"""
import sys

import numpy as np
import gguf

WORDS = """the of and to in is that for it as was with be by on not he this are or his from at which but
have an had they you were their one all we can her has there been if more when will would who so no she
other its may these what them than some him time into only do two first any new like my made over such
our even most after also did many before must through back years where much your way well down should
because each just those people how too little state good very make world still own see men work long get
here between both life being under never day same another know while last might us great old year off
come since against go came right used take three water house light small city road river stone music
paper table green north hello world answer question""".split()

N_EMBD, N_FF, N_LAYER, N_HEAD, N_CTX = 64, 128, 2, 4, 2048


def vocab():
    tokens, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        scores.append(0.0)
        types.append(6)  # byte
    pieces = ["\u2581"] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    pieces += ["\u2581" + chr(c) for c in range(ord("a"), ord("z") + 1)]
    seen = set(pieces)
    for w in WORDS:
        p = "\u2581" + w
        if p not in seen:
            seen.add(p)
            pieces.append(p)
    # SPM picks the highest-scoring segmentation: longer pieces score higher.
    for p in pieces:
        tokens.append(p)
        scores.append(-1000.0 + 10.0 * len(p))
        types.append(1)
    return tokens, scores, types


def main(out):
    rng = np.random.default_rng(0)
    tokens, scores, types = vocab()
    n_vocab = len(tokens)
    w = gguf.GGUFWriter(out, "llama")
    w.add_name("servetune-tiny-llama")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    def mat(rows, cols):
        return (rng.standard_normal((rows, cols)) * 0.02).astype(np.float16)

    w.add_tensor("token_embd.weight", mat(n_vocab, N_EMBD))
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    w.add_tensor("output.weight", mat(n_vocab, N_EMBD))
    for i in range(N_LAYER):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(f"blk.{i}.{t}.weight", mat(N_EMBD, N_EMBD))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", mat(N_FF, N_EMBD))
        w.add_tensor(f"blk.{i}.ffn_up.weight", mat(N_FF, N_EMBD))
        w.add_tensor(f"blk.{i}.ffn_down.weight", mat(N_EMBD, N_FF))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
