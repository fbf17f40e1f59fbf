"""The HTML report as a reader sees it: rendered by headless Chromium (Debian's `chromium`, which
`make setup` installs) from the two golden recordings, compared; then the rendered DOM and a
screenshot are checked: each emulation banner once, no markdown syntax, no caveat said twice, the
plots' text inside their drawings (no cut-off titles), and a page that is not blank."""
import re
import shutil
import subprocess
from html.parser import HTMLParser

import numpy as np
import pytest
from vtcli import DATA, vt

pytestmark = pytest.mark.integration
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--disable-dev-shm-usage"]


class Page(HTMLParser):
    """The visible text (not styles, not SVG), the banners, the caveats and every SVG's text."""

    def __init__(self):
        super().__init__()
        self.stack, self.text, self.banners, self.caveats, self.svgs = [], [], [], [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.stack.append((tag, a.get("class") or ""))
        if tag == "svg":
            box = [float(x) for x in a["viewbox"].split()]
            self.svgs.append({"box": box, "texts": []})
        if tag == "text" and self.svgs and "x" in a:  # (log tick labels: tspans in a translated group)
            size = float(re.search(r"font-size: ([\d.]+)px", a.get("style", "")).group(1))
            self.svgs[-1]["texts"].append([float(a["x"]), float(a["y"]), size, ""])

    def handle_endtag(self, tag):
        while self.stack and self.stack.pop()[0] != tag:
            pass

    def handle_data(self, data):
        tags = [t for t, _ in self.stack]
        if "style" in tags:
            return
        if "svg" in tags:
            if tags[-1] == "text" and self.svgs and self.svgs[-1]["texts"] and not self.svgs[-1]["texts"][-1][3]:
                self.svgs[-1]["texts"][-1][3] += data
            return
        if data.strip():
            self.text.append(data)
            classes = [c for _, c in self.stack]
            if "emu" in classes:
                self.banners.append(data.strip())
            if "caveat" in classes:
                self.caveats.append(data.strip())


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    assert CHROMIUM is not None, "no chromium: make setup installs Debian's chromium (scripts/setup-system.sh)"
    d = tmp_path_factory.mktemp("html")
    page = d / "report.html"
    res = vt("report", "--compare", DATA / "golden-v1-both-always.vtrace", DATA / "golden-v1-ebpf-everysec.vtrace",
             "--format", "html", "-o", page)
    assert res.returncode == 0, res.stderr
    dom = subprocess.run([CHROMIUM, *FLAGS, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120)
    assert dom.returncode == 0 and "<body" in dom.stdout, dom.stderr[-500:]
    shot = d / "page.png"
    subprocess.run([CHROMIUM, *FLAGS, "--window-size=1280,3000", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=120)
    parsed = Page()
    parsed.feed(dom.stdout)
    return parsed, page, shot


def test_each_banner_once_and_no_markdown_syntax(rendered):
    page, _, _ = rendered
    text = " ".join(page.text)
    assert page.banners == ["fsync-always: fsync latency emulated: +1 ms per call."]
    assert text.count("fsync latency emulated") == 1, "the emulation sentence is repeated"
    for syntax in ("`", "**", "|---"):
        assert syntax not in text, f"markdown syntax {syntax!r} shows on the page"
    starts = [t.strip()[:2] for t in page.text]
    assert not {"> ", "- ", "# "} & set(starts), "a markdown quote, bullet or heading marker shows on the page"
    assert "fsync-always vs" not in text and "fsync-everysec vs fsync-always" in text


def test_server_threads_per_cell(rendered):
    page, _, _ = rendered
    text = " ".join(page.text)
    tables = text.count("· server threads (")
    assert tables >= 2 and text.count("main-thread budget: on CPU") == tables


def test_no_caveat_is_said_twice(rendered):
    page, _, _ = rendered
    assert page.caveats, "the compared goldens have caveats"
    assert len(page.caveats) == len(set(page.caveats)), page.caveats


def test_the_plots_text_is_inside_each_drawing(rendered):
    page, _, _ = rendered
    assert len(page.svgs) >= 3
    titles = [t for svg in page.svgs for t in svg["texts"] if t[3].startswith("Client latency CDF")]
    assert titles, "the latency CDF has its title"
    for svg in page.svgs:
        x0, y0, w, h = svg["box"]
        for x, y, size, content in svg["texts"]:
            assert y0 + size * 0.7 <= y <= y0 + h + 1, f"{content!r} is cut at the top or bottom (y={y}, h={h})"
            assert x0 - 1 <= x <= x0 + w + 1, f"{content!r} lies outside the drawing (x={x}, w={w})"


def test_the_page_is_small_and_not_blank(rendered):
    _, page, shot = rendered
    assert page.stat().st_size < 600_000, f"{page.stat().st_size} bytes for two cells"
    import matplotlib.image

    img = matplotlib.image.imread(str(shot))
    assert img.shape[1] == 1280 and float(np.std(img[..., :3])) > 0.05, "the screenshot is blank"


def test_the_verdict_comes_first_with_a_table_of_contents(rendered):
    page, html_path, _ = rendered
    text = " ".join(page.text)
    html = html_path.read_text()
    assert "<nav id='toc'>" in html and "href='#verdict'" in html and "href='#tables'" in html
    # the verdict (with its changes in percent) before the #4029 tables and the thread appendix
    v, t, a = text.index("Verdict"), text.index("Read-heavy (GET + SET)"), text.index("server threads (")
    assert v < t < a, (v, t, a)
    assert "read-heavy GET 64 B" in text[v:t] and "%" in text[v:t]
    assert "<details id='threads'>" in html  # the per-thread tables behind a disclosure


def test_the_cdf_is_one_readable_panel_per_cell_with_its_repeats_named(rendered):
    page, _, _ = rendered
    (cdf,) = [svg for svg in page.svgs if any(t[3].startswith("Client latency CDF") for t in svg["texts"])]
    x0, y0, w, h = cdf["box"]
    assert w / h < 3.5, f"the CDF is a {w:.0f}x{h:.0f} strip"
    legends = [t[3] for t in cdf["texts"]]
    assert any("fsync-always #1" in x for x in legends) and any("fsync-everysec #1" in x for x in legends), legends
