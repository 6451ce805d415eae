"""The docs site (mkdocs.yml; Material theme, the API from docstrings by mkdocstrings): it builds with
``mkdocs build --strict``, its pages hold the public API, and the strict build fails on a broken link.

Only mkdocs and its plugins are needed (the dev extra installs them): nothing here imports torch or the
project's packages; mkdocstrings reads their source without importing it. Without mkdocs the tests skip.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# what the build imports: mkdocs, the Material theme, mkdocstrings and its Python handler
TOOLS = ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers")
MISSING = [name for name in TOOLS if importlib.util.find_spec(name) is None]
needs_mkdocs = pytest.mark.skipif(bool(MISSING), reason=f"the docs tools are not installed ({', '.join(MISSING)} "
                                  "missing): scripts/setup.sh installs them with the dev extra; alone: pip install "
                                  "-c constraints.txt mkdocs-material 'mkdocstrings[python]'")

# page of the built site -> anchors (object paths) it must hold: the public API the issue asks for
API = {
    "api/xbm/index.html": ["xbm.trainer.Trainer", "xbm.config.TrainConfig", "xbm.memory.EmbeddingMemory",
                           "xbm.memory.IndexedMemory", "xbm.losses.xbm_loss.XBMLoss",
                           "xbm.evaluate.embedder.load_embedder"],
    "api/normalisers/index.html": ["xbm.normalisers.config.NormaliserConfig",
                                   "xbm.normalisers.registry.build_normaliser", "xbm.normalisers.xbn.XBN",
                                   "xbm.normalisers.axbn.AXBN", "xbm.normalisers.ema.EMA",
                                   "xbm.normalisers.pcxbn.PerClassXBN", "xbm.normalisers.scxbn.SuperClassXBN"],
    "api/tune/index.html": ["tune.cli.main", "tune.driver.options.SweepOptions", "tune.driver.sweep.run_sweep",
                            "tune.commands.sweep", "tune.commands.confirm", "tune.commands.report"],
    "api/analysis/index.html": ["analysis.loader.load", "analysis.compare.compare_variants",
                                "analysis.compare.paired_differences"],
}


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}   # Material's banner about its successor, not a build problem
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(root / "mkdocs.yml"), "--site-dir", str(site)],
                          cwd=root, capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.slow
@needs_mkdocs
def test_the_site_builds_strictly_with_the_api_and_the_readme_as_home(tmp_path):
    """Bugs caught: a docs change that breaks the strict build (a link to a missing page, an anchor no heading
    makes, a nav entry without its page, a docstring the handler cannot read), an API page that lost an object,
    and a home page that is not the README or whose links to the guide do not resolve."""
    run = build(ROOT, tmp_path / "site")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    assert "Documentation built in" in run.stderr
    for page, objects in API.items():
        html = (tmp_path / "site" / page).read_text(encoding="utf-8")
        absent = [name for name in objects if f'id="{name}"' not in html]
        assert not absent, f"{page} lacks {absent}"
    home = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert 'id="xbm-tune"' in home and 'id="quick-start"' in home   # README.md's headings
    assert 'href="sweeps/"' in home and 'href="docs/' not in home    # its docs/ links, made the site's own


# the planted links: (file, the text appended to it, what the build's warning names)
PLANTED = {
    "a page that does not exist": ("docs/memory.md", "[gone](no_such_page.md)", "no_such_page.md"),
    "an anchor no heading makes": ("docs/sweeps.md", "[gone](trainer.md#no-such-heading)", "#no-such-heading"),
    "a file outside docs/": ("docs/trainer.md", "[source](../xbm/memory/ring.py)", "../xbm/memory/ring.py"),
    "the README's link to a missing page": ("README.md", "[gone](docs/no_such_readme_page.md)",
                                            "no_such_readme_page.md"),
}


@pytest.mark.slow
@needs_mkdocs
def test_the_strict_build_fails_on_a_broken_link(tmp_path):
    """Bug caught: a docs build that no longer fails on broken links (validation settings loosened, ``--strict``
    dropped, the README's links passed through unchecked). A copy of mkdocs.yml, docs/ and README.md gets one
    broken link of each kind; the strict build must fail and name every one."""
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", copy / "docs")
    for name in ("mkdocs.yml", "README.md"):
        shutil.copy2(ROOT / name, copy / name)
    for package in ("xbm", "tune", "analysis"):   # mkdocstrings reads them from beside mkdocs.yml
        (copy / package).symlink_to(ROOT / package, target_is_directory=True)
    for file, text, _ in PLANTED.values():
        with open(copy / file, "a", encoding="utf-8") as out:
            out.write(f"\n\n{text}\n")
    run = build(copy, tmp_path / "site")
    assert run.returncode != 0, "the strict build passed with broken links:\n" + run.stderr[-4000:]
    warnings = [line for line in run.stderr.splitlines() if line.startswith("WARNING")]
    unreported = [kind for kind, (_, _, named) in PLANTED.items() if not any(named in line for line in warnings)]
    assert not unreported, f"not reported: {unreported}\n" + "\n".join(warnings)
    assert len(warnings) == len(PLANTED), "\n".join(warnings)   # the copy has no other problem
    assert f"Aborted with {len(PLANTED)} warnings in strict mode" in run.stdout + run.stderr


def hook():
    spec = importlib.util.spec_from_file_location("docs_readme_hook", ROOT / "docs" / "hooks" / "readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_hook_makes_docs_links_relative_to_the_home_page():
    """Bugs caught: the home page keeping README.md's ``docs/`` prefix (every link to the guide broken on the
    site) or stripping it where it is not a relative link's start (an address, a code span, a word)."""
    site_links = hook().site_links
    assert site_links("see [sweeps](docs/sweeps.md) and [t](docs/ARCHITECTURE.md#tests)") == \
        "see [sweeps](sweeps.md) and [t](ARCHITECTURE.md#tests)"
    assert site_links("![shot](docs/img/ray-jobs.png)") == "![shot](img/ray-jobs.png)"
    assert site_links("[ref]: docs/memory.md\n") == "[ref]: memory.md\n"
    kept = "[a](https://example.org/docs/x.md), `docs/sweeps.md`, [s](scripts/setup.sh), mydocs/x.md"
    assert site_links(kept) == kept
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert not re.search(r"\]\(\s*docs/", site_links(readme))
