# PyTorch's side of src/nn's layers, for torch 1.13 (Debian's python3-torch): nanoGPT's MLP,
# CausalSelfAttention (with modded-nanogpt's v = v + ve) and Block as nanoGPT writes them, RMSNorm
# (torch.nn.RMSNorm arrived in torch 2.4) and a GPT without a tied head. Their state_dict keys are
# the names tapegrad's modules give; bias=False is nanoGPT's option of that name (its LayerNorms'
# biases then stay 0, untrained: torch 1.13's LayerNorm has no bias=False). read_safetensors reads
# tapegrad's export with numpy alone. Used by tests/fixtures/gen_nn_values.py, check_export.py and
# tests/gpt/parity.py.
import json
import math
import struct

import numpy as np

import torch
import torch.nn as nn
import torch.nn.functional as F


def read_safetensors(path):
    """name -> numpy array, from a safetensors file (the format of docs/nn.md)."""
    raw = open(path, 'rb').read()
    (n,) = struct.unpack('<Q', raw[:8])
    header = json.loads(raw[8:8 + n])
    types = {'F64': np.float64, 'F32': np.float32, 'I64': np.int64, 'I32': np.int32, 'U8': np.uint8, 'F16': np.float16}
    out = {}
    for name, entry in header.items():
        if name == '__metadata__':
            continue
        begin, end = entry['data_offsets']
        out[name] = np.frombuffer(raw[8 + n + begin:8 + n + end], dtype=types[entry['dtype']]).reshape(entry['shape'])
    return out


def layer_norm(dim, bias=True):
    """nn.LayerNorm, its bias held at 0 and untrained for bias=False."""
    ln = nn.LayerNorm(dim)
    if not bias:
        ln.bias.requires_grad_(False)
    return ln


class RMSNorm(nn.Module):  # torch.nn.RMSNorm (torch >= 2.4), eps None = the dtype's epsilon
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        eps = torch.finfo(x.dtype).eps
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * self.weight


class MLP(nn.Module):  # nanoGPT's
    def __init__(self, dim, hidden, bias=True, gelu="none"):
        super().__init__()
        self.c_fc = nn.Linear(dim, hidden, bias=bias)
        self.gelu = nn.GELU(approximate=gelu)
        self.c_proj = nn.Linear(hidden, dim, bias=bias)
        self.dropout = nn.Dropout(0.0)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class CausalSelfAttention(nn.Module):  # nanoGPT's, with modded-nanogpt's v = v + ve
    def __init__(self, dim, heads, bias=True):
        super().__init__()
        self.c_attn = nn.Linear(dim, 3 * dim, bias=bias)
        self.c_proj = nn.Linear(dim, dim, bias=bias)
        self.resid_dropout = nn.Dropout(0.0)
        self.n_head, self.n_embd = heads, dim

    def forward(self, x, ve=None):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        if ve is not None:
            v = v + ve
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if hasattr(F, 'scaled_dot_product_attention'):  # torch >= 2.0 (the H200's): its fused kernel
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch 1.13: the same product, written out
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(torch.ones(T, T, device=x.device).tril() == 0, float('-inf'))
            y = F.softmax(att, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class Block(nn.Module):  # nanoGPT's
    def __init__(self, dim, heads, bias=True, gelu="none"):
        super().__init__()
        self.ln_1 = layer_norm(dim, bias)
        self.attn = CausalSelfAttention(dim, heads, bias)
        self.ln_2 = layer_norm(dim, bias)
        self.mlp = MLP(dim, 4 * dim, bias, gelu)

    def forward(self, x, ve=None):
        x = x + self.attn(self.ln_1(x), ve)
        return x + self.mlp(self.ln_2(x))


class TinyGPT(nn.Module):  # tests/nn/nn_testing.hpp's TinyGPT: nanoGPT's GPT with an untied lm_head
    def __init__(self, vocab, block_size, dim, heads, layers):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(block_size, dim)
        self.h = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))
