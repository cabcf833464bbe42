"""``torch.autocast("cuda")`` on the predicted device: CUDA's casting rules on CPU tensors.

A prediction's tensors are fake CPU tensors, so ``autocast("cuda")`` runs as ``autocast("cpu")``
(``_fakecuda``). The CPU's rules differ from CUDA's, and they decide what a step keeps: CUDA
runs ``exp``, ``pow``, ``softmax``, ``layer_norm`` and the losses in float32 where the CPU
stays in bfloat16, so a transformer's attention scores cost twice as much on a GPU. Here
every operator either list names gets a kernel at the ``AutocastCPU`` key that applies
CUDA's policy for it (``_CUDA``, PyTorch's ``autocast_mode.h`` lists), or none where only the
CPU casts. Like PyTorch, casts of leaf tensors that require grad (the weights) to the lower
precision are cached until the outermost autocast region ends, so each weight's copy is
made once per forward and held until then.
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch.utils._pytree import tree_map

# CUDA's policy for each operator (overload) it casts, by PyTorch's CastPolicy.
LOWER = "lower_precision_fp"
FP32 = "fp32"
SET_DTYPE = "fp32_set_opt_dtype"
APPEND_DTYPE = "fp32_append_dtype"
PROMOTE = "promote"
BANNED = "banned"
#: What ``autocast_mode.h`` registers for ``AutocastCUDA``; a test holds it to the operators
#: the installed PyTorch registers (a new PyTorch that adds one fails it).
_CUDA: Dict[str, str] = {}
for _names, _policy in (
    ("_convolution _convolution.deprecated conv1d conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d.input "
     "conv_transpose3d.input convolution cudnn_convolution cudnn_convolution_transpose prelu addmm addmv addr "
     "matmul einsum mm mv linalg_vecdot linear addbmm baddbmm bmm chain_matmul linalg_multi_dot "
     "_thnn_fused_lstm_cell _thnn_fused_gru_cell lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell "
     "_scaled_dot_product_flash_attention scaled_dot_product_attention _cudnn_rnn", LOWER),
    ("acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow.Tensor_Scalar "
     "pow.Tensor_Tensor pow.Scalar softplus layer_norm native_layer_norm group_norm rms_norm frobenius_norm.dim "
     "nuclear_norm nuclear_norm.dim cosine_similarity poisson_nll_loss cosine_embedding_loss nll_loss nll_loss2d "
     "hinge_embedding_loss kl_div l1_loss smooth_l1_loss huber_loss mse_loss margin_ranking_loss "
     "multilabel_margin_loss soft_margin_loss triplet_margin_loss multi_margin_loss "
     "binary_cross_entropy_with_logits dist pdist cdist renorm logsumexp linalg_matrix_sqrth upsample_nearest1d "
     "_upsample_nearest_exact1d upsample_nearest2d _upsample_nearest_exact2d upsample_nearest3d "
     "_upsample_nearest_exact3d upsample_linear1d upsample_bilinear2d _upsample_bilinear2d_aa "
     "upsample_trilinear3d upsample_bicubic2d _upsample_bicubic2d_aa", FP32),
    ("prod prod.dim_int softmax.int log_softmax.int cumprod cumsum linalg_vector_norm linalg_matrix_norm "
     "linalg_matrix_norm.str_ord sum sum.dim_IntList", SET_DTYPE),
    ("norm.Scalar norm.ScalarOpt_dim", APPEND_DTYPE),
    ("addcdiv addcmul atan2 bilinear cross dot vdot grid_sampler index_put scatter_add tensordot", PROMOTE),
    ("binary_cross_entropy", BANNED),
):
    for _n in _names.split():
        _CUDA[_n] = _policy

_CPU_KEY = torch._C.DispatchKey.AutocastCPU


def registered(key: str) -> List[str]:
    """The operators (``name.overload``, without ``aten::``) with a kernel at ``key``."""
    names = torch._C._dispatch_get_all_op_names()
    return sorted(n[len("aten::"):] for n in names
                  if n.startswith("aten::") and torch._C._dispatch_has_kernel_for_dispatch_key(n, key))


def _overload(name: str) -> Any:
    op, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, op), overload or "default")


class Rules:
    """CUDA's autocast rules installed at the CPU's autocast key, while it lives."""

    def __init__(self) -> None:
        self.cache: Dict[int, Tuple[torch.Tensor, torch.Tensor]] = {}
        self.depth = 0
        self.lib = torch.library.Library("aten", "IMPL")
        cpu = set(registered("AutocastCPU"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name in sorted(cpu | set(_CUDA)):
                try:
                    op = _overload(name)
                except AttributeError:
                    continue
                policy = _CUDA.get(name)
                self.lib.impl(name, self._kernel(op, policy), "AutocastCPU")

    def close(self) -> None:
        self.cache.clear()
        self.lib._destroy()

    def entered(self) -> None:
        self.depth += 1

    def exited(self) -> None:
        self.depth -= 1
        if self.depth <= 0:
            self.depth = 0
            self.cache.clear()

    def _cast(self, t: Any, dtype: torch.dtype) -> Any:
        if not (isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64) or t.dtype == dtype:
            return t
        lower = dtype != torch.float32
        if lower and t.is_leaf and t.requires_grad and torch.is_autocast_cache_enabled():
            hit = self.cache.get(id(t))
            if hit is not None and hit[0] is t:
                return hit[1]
            out = t.to(dtype)
            self.cache[id(t)] = (t, out)
            return out
        return t.to(dtype)

    def _kernel(self, op: Any, policy: Optional[str]) -> Any:
        guard = torch._C.DispatchKeySet(_CPU_KEY)
        names = [a.name for a in op._schema.arguments if not a.kwarg_only]
        dtype_at = names.index("dtype") if "dtype" in names else None

        def kernel(*args: Any, **kwargs: Any) -> Any:
            with torch._C._ExcludeDispatchKeyGuard(guard):
                if policy is None:
                    return op(*args, **kwargs)
                if policy == BANNED:
                    raise RuntimeError(
                        "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast "
                        "(as on a GPU): use binary_cross_entropy_with_logits or BCEWithLogitsLoss")
                lower = torch.get_autocast_dtype("cpu")
                if policy == LOWER:
                    args, kwargs = tree_map(lambda t: self._cast(t, lower), (args, kwargs))
                elif policy in (FP32, APPEND_DTYPE):
                    args, kwargs = tree_map(lambda t: self._cast(t, torch.float32), (args, kwargs))
                elif policy == SET_DTYPE:
                    first = args[0] if args else None
                    if isinstance(first, torch.Tensor) and first.is_floating_point() and first.dtype != torch.float64:
                        if dtype_at is not None and dtype_at < len(args):
                            if args[dtype_at] is None:
                                args = args[:dtype_at] + (torch.float32,) + args[dtype_at + 1:]
                        elif kwargs.get("dtype") is None:
                            kwargs = dict(kwargs, dtype=torch.float32)
                elif policy == PROMOTE:
                    floats = [t.dtype for t in _tensors((args, kwargs)) if t.is_floating_point() and t.dtype != torch.float64]
                    to = torch.float32 if torch.float32 in floats else lower
                    args, kwargs = tree_map(lambda t: self._cast(t, to), (args, kwargs))
                return op(*args, **kwargs)

        return kernel


def _tensors(tree: Any) -> List[torch.Tensor]:
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(tree) if isinstance(t, torch.Tensor)]
