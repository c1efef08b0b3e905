"""What the experiments write: their output directory, JSON records, PNG figures, progress bars.

matplotlib is imported only by the functions that draw (a heavy optional dependency: the experiments'
numbers need none of it).
"""
from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Sequence

from tqdm import tqdm

from joinlib.errors import JoinlibError

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def prepare_out(path: Path) -> Path:
    """Create the output directory (JoinlibError if impossible)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise JoinlibError(f"--out {path} exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise JoinlibError(f"cannot create {path}: {e.strerror or e}") from None
    return path


def write_json(path: Path, data: Any, records: Sequence[str] = ()) -> None:
    """Indented JSON, except that the lists under the top-level keys ``records`` get
    one compact line per element (run records: readable and small)."""
    if not records or not isinstance(data, dict):
        Path(path).write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")
        return
    parts = []
    for k, v in data.items():
        key = json.dumps(k)
        if k in records and isinstance(v, list):
            body = ",\n  ".join(json.dumps(x, separators=(",", ":"), allow_nan=False) for x in v)
            parts.append(f" {key}: [\n  {body}\n ]" if v else f" {key}: []")
        else:
            text = json.dumps(v, indent=1, allow_nan=False).replace("\n", "\n ")
            parts.append(f" {key}: {text}")
    Path(path).write_text("{\n" + ",\n".join(parts) + "\n}\n")


def save_png(fig: Figure, path: Path, dpi: int = 80) -> Path:
    """Save ``fig`` as a 64-colour PNG (a third of the size of the RGBA file, same look)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    try:
        from PIL import Image  # heavy optional dependency: Pillow (comes with matplotlib)
    except ImportError:  # pragma: no cover - Pillow comes with matplotlib
        Path(path).write_bytes(buf.getvalue())
        return Path(path)
    buf.seek(0)
    img = Image.open(buf).convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT,
                                                  dither=Image.Dither.NONE)
    img.save(path, format="PNG", optimize=True)
    return Path(path)


def progress_bar(total: int, desc: str, enabled: bool) -> tqdm[NoReturn]:
    """A tqdm bar on stderr (a no-op object when disabled)."""
    return tqdm(total=total, desc=desc, unit="run", disable=not enabled, file=sys.stderr,
                leave=False, dynamic_ncols=True)


def new_figure(width: float, height: float) -> Figure:
    """A matplotlib Figure without pyplot (no global state, no display backend).

    Margins are set by hand (:func:`fit`): the automatic layout engines double the
    drawing time."""
    from matplotlib.figure import Figure  # heavy optional dependency: matplotlib
    return Figure(figsize=(width, height), dpi=100)


def fit(fig: Figure, top: float = 0.9, hspace: float = 0.45, wspace: float = 0.3) -> None:
    """Fixed margins sized for the titles and labels these figures use."""
    w, h = fig.get_size_inches()
    fig.subplots_adjust(left=0.65 / w, right=1 - 0.2 / w, bottom=0.55 / h, top=top, hspace=hspace, wspace=wspace)
