"""tenferro.fft: discrete Fourier transforms on the daemon, as numpy.fft.

fftn, ifftn, rfftn, irfftn (and the one-axis fft, ifft, rfft, irfft) with
numpy's axes=, norm= ("backward", the default, "ortho", "forward") and sign
convention. Like every operation they queue in the operands' session.

What differs from numpy: no dtype promotion (fft/ifft take complex64 or
complex128, rfft float32 or float64: a real tensor given to fft is a
DtypeError; use rfft), and s=/n= may only name the lengths the input already
has, except the last transformed length of irfft/irfftn, which picks the
output's length (numpy's default 2*(m-1)). Padding or cropping is
UnsupportedError.
"""
from __future__ import annotations

from typing import Sequence

from . import _tenferro
from ._tenferro import Tensor, UnsupportedError

__all__ = ["fftn", "ifftn", "rfftn", "irfftn", "fft", "ifft", "rfft", "irfft"]

_FFT, _IFFT, _RFFT, _IRFFT = 0, 1, 2, 3


def _axes_for(a: Tensor, s: Sequence[int] | None, axes: Sequence[int] | None):
    if axes is None and s is not None:
        axes = tuple(range(a.ndim - len(s), a.ndim))
    return None if axes is None else tuple(int(x) for x in axes)


def _check_s(a: Tensor, s: Sequence[int] | None, axes, inverse_real: bool) -> int:
    """The irfft output length named by s (0: numpy's default); refuses padding and cropping."""
    if s is None:
        return 0
    axes = tuple(range(a.ndim)) if axes is None else axes
    if len(s) != len(axes):
        raise ValueError("s and axes must have the same length")
    for k, (n, ax) in enumerate(zip(s, axes)):
        if inverse_real and k == len(s) - 1:
            continue
        if int(n) != a.shape[ax]:
            raise UnsupportedError(
                f"tenferro.fft: s[{k}]={n} pads or crops axis {ax} (length {a.shape[ax]}): "
                "tenferrod transforms the lengths the tensor has")
    return int(s[-1]) if inverse_real else 0


def fftn(a: Tensor, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
         norm: str | None = None) -> Tensor:
    """The complex forward transform over axes (all by default), as numpy.fft.fftn."""
    axes = _axes_for(a, s, axes)
    _check_s(a, s, axes, False)
    return _tenferro._fft(_FFT, a, axes, norm, 0)


def ifftn(a: Tensor, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
          norm: str | None = None) -> Tensor:
    """The complex inverse transform over axes, as numpy.fft.ifftn."""
    axes = _axes_for(a, s, axes)
    _check_s(a, s, axes, False)
    return _tenferro._fft(_IFFT, a, axes, norm, 0)


def rfftn(a: Tensor, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
          norm: str | None = None) -> Tensor:
    """The real-to-complex transform; the last listed axis n becomes n//2+1 (numpy.fft.rfftn)."""
    axes = _axes_for(a, s, axes)
    _check_s(a, s, axes, False)
    return _tenferro._fft(_RFFT, a, axes, norm, 0)


def irfftn(a: Tensor, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
           norm: str | None = None) -> Tensor:
    """The complex-to-real inverse; s[-1] is the output's last length (default 2*(m-1))."""
    axes = _axes_for(a, s, axes)
    last = _check_s(a, s, axes, True)
    return _tenferro._fft(_IRFFT, a, axes, norm, last)


def fft(a: Tensor, n: int | None = None, axis: int = -1, norm: str | None = None) -> Tensor:
    """The one-axis complex forward transform (numpy.fft.fft)."""
    return fftn(a, None if n is None else (n,), (axis,), norm)


def ifft(a: Tensor, n: int | None = None, axis: int = -1, norm: str | None = None) -> Tensor:
    """The one-axis complex inverse transform (numpy.fft.ifft)."""
    return ifftn(a, None if n is None else (n,), (axis,), norm)


def rfft(a: Tensor, n: int | None = None, axis: int = -1, norm: str | None = None) -> Tensor:
    """The one-axis real-to-complex transform (numpy.fft.rfft)."""
    return rfftn(a, None if n is None else (n,), (axis,), norm)


def irfft(a: Tensor, n: int | None = None, axis: int = -1, norm: str | None = None) -> Tensor:
    """The one-axis complex-to-real inverse (numpy.fft.irfft); n is the output length."""
    return irfftn(a, None if n is None else (n,), (axis,), norm)
