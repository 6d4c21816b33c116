# PyTorch's side of tests/nn/layers_driver.cpp: check_layers.py EXPORT IMPORT
# tapegrad -> PyTorch: each case's layer is built in torch (f64), loads tapegrad's default-initialised
# state dict with strict=True, runs the same inputs (requiring gradients) and must give the same
# outputs, and the same gradients of loss = sum_k sum(out_k * r_k) for every parameter and input:
# within 1e-10 of each tensor's largest value.
# optim::Adam: 3 steps against torch.optim.Adam's, the same gradients, within the same tolerance.
# PyTorch -> tapegrad: writes IMPORT, each case's torch layer from torch's own default initialisation
# (its state dict) and its outputs on the same inputs, for `layers_driver check` to load strictly.
import json
import os
import re
import struct
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_layers import read_safetensors  # noqa: E402

torch.set_default_dtype(torch.float64)
TOL = 1e-10


def lstm(m, x):
    out, (h, c) = m(x[0], (x[1], x[2])) if len(x) > 1 else m(x[0])
    return [out, h, c]


def lstm_cell(m, x):
    return list(m(x[0], (x[1], x[2])) if len(x) > 1 else m(x[0]))


def gru(m, x):
    return list(m(x[0], x[1]) if len(x) > 1 else m(x[0]))


def one(m, x):
    return [m(x[0])]


def gru_cell(m, x):
    return [m(x[0], x[1]) if len(x) > 1 else m(x[0])]


# the cases of layers_driver.cpp, by name
CASES = {
    'conv2d': (lambda: nn.Conv2d(3, 4, 3, 1, 1), one),
    'conv2d_rect_stride_nobias': (lambda: nn.Conv2d(2, 3, (2, 3), 2, 0, bias=False), one),
    'conv2d_unbatched': (lambda: nn.Conv2d(3, 2, 3), one),
    'max_pool2d': (lambda: nn.MaxPool2d(2), one),
    'max_pool2d_stride_padding': (lambda: nn.MaxPool2d(3, 2, 1), one),
    'avg_pool2d': (lambda: nn.AvgPool2d(2), one),
    'avg_pool2d_stride_padding': (lambda: nn.AvgPool2d(3, 2, 1), one),
    'flatten': (lambda: nn.Flatten(), one),
    'flatten_0_1': (lambda: nn.Flatten(0, 1), one),
    'relu': (lambda: nn.ReLU(), one),
    'gelu': (lambda: nn.GELU(), one),
    'gelu_tanh': (lambda: nn.GELU(approximate='tanh'), one),
    'tanh': (lambda: nn.Tanh(), one),
    'sigmoid': (lambda: nn.Sigmoid(), one),
    'silu': (lambda: nn.SiLU(), one),
    'softmax': (lambda: nn.Softmax(1), one),
    'log_softmax': (lambda: nn.LogSoftmax(-1), one),
    'sequential_cnn': (lambda: nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                                             nn.Linear(36, 5), nn.Tanh()), one),
    'lstm_cell': (lambda: nn.LSTMCell(3, 5), lstm_cell),
    'lstm_cell_zero_state_nobias': (lambda: nn.LSTMCell(3, 4, bias=False), lstm_cell),
    'gru_cell': (lambda: nn.GRUCell(3, 5), gru_cell),
    'gru_cell_unbatched': (lambda: nn.GRUCell(3, 4), gru_cell),
    'lstm_2_layers_state': (lambda: nn.LSTM(3, 5, 2), lstm),
    'lstm_bidirectional_batch_first': (lambda: nn.LSTM(3, 4, 2, batch_first=True, bidirectional=True), lstm),
    'lstm_unbatched': (lambda: nn.LSTM(3, 4), lstm),
    'gru_2_layers_state': (lambda: nn.GRU(3, 5, 2), gru),
    'gru_bidirectional_batch_first_nobias': (lambda: nn.GRU(3, 4, 1, bias=False, batch_first=True,
                                                            bidirectional=True), gru),
}


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = np.ascontiguousarray(t.detach().numpy().astype(np.float64)).tobytes()
        header[name] = {'dtype': 'F64', 'shape': list(t.shape), 'data_offsets': [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b' ' * (-len(text) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(text)) + text + b''.join(blobs))


def relative(ours, theirs):
    scale = max(theirs.abs().max().item(), 1e-300)
    return (torch.from_numpy(np.array(ours)) - theirs.detach()).abs().max().item() / scale


tensors = read_safetensors(sys.argv[1])
names = sorted({k.split('/')[0] for k in tensors} - {'adam'})
if sorted(CASES) != names:
    sys.exit(f'the driver has cases {names}, this script {sorted(CASES)}')
failures, worst, imported = 0, {}, {}
torch.manual_seed(37)
for name, (build, forward) in CASES.items():
    mine = {k[len(name) + 1:]: torch.from_numpy(v.copy()) for k, v in tensors.items() if k.startswith(name + '/')}
    model = build()
    weights = {k: v for k, v in mine.items() if '/' not in k and not re.fullmatch(r'(in|r|out)\d+', k)}
    model.load_state_dict(weights, strict=True)
    inputs = [mine[f'in{k}'].clone().requires_grad_() for k in range(sum(1 for k in mine if re.fullmatch(r'in\d+', k)))]
    outputs = forward(model, inputs)
    loss = sum((out * mine[f'r{k}']).sum() for k, out in enumerate(outputs))
    loss.backward()
    checks = [(f'out{k}', out) for k, out in enumerate(outputs)]
    checks += [(f'grad/{k}', p.grad) for k, p in model.named_parameters()]
    checks += [(f'grad/in{k}', x.grad) for k, x in enumerate(inputs)]
    case_worst = 0.0
    for what, theirs in checks:
        err = relative(mine[what], theirs)
        case_worst = max(case_worst, err)
        if not err <= TOL:
            failures += 1
            print(f'FAIL {name}/{what}: largest difference {err:.3g} of its largest value, tolerance {TOL:g}')
    worst[name] = case_worst
    print(f'{name}: {len(checks)} tensors ({len(outputs)} outputs, {len(list(model.parameters()))} parameter and '
          f'{len(inputs)} input gradients), largest relative difference {case_worst:.3g}')
    # PyTorch -> tapegrad: a fresh torch layer from torch's initialisation, and its outputs
    fresh = build()
    with torch.no_grad():
        for k, v in fresh.state_dict().items():
            imported[f'{name}/{k}'] = v
        for k, out in enumerate(forward(fresh, [x.detach() for x in inputs])):
            imported[f'{name}/out{k}'] = out
write_safetensors(sys.argv[2], imported)

# optim.Adam against torch.optim.Adam: L2 weight decay in the gradient, 3 steps of given gradients
w = nn.Parameter(torch.from_numpy(tensors['adam/w0'].copy()))
adam = torch.optim.Adam([w], lr=0.01, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
adam_worst = 0.0
for t in range(1, 4):
    w.grad = torch.from_numpy(tensors[f'adam/g{t}'].copy())
    adam.step()
    err = relative(tensors[f'adam/w{t}'], w)
    adam_worst = max(adam_worst, err)
    if not err <= TOL:
        failures += 1
        print(f'FAIL adam/w{t}: largest difference {err:.3g} of its largest value, tolerance {TOL:g}')
print(f'optim.Adam: 3 steps, weights within {adam_worst:.3g} of torch.optim.Adam\'s (tolerance {TOL:g})')
print(f'tapegrad -> PyTorch: {len(CASES)} cases loaded strictly, largest relative difference '
      f'{max(worst.values()):.3g} (tolerance {TOL:g})')
sys.exit(1 if failures else 0)
