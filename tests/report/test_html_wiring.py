"""`--html` on `fusecheck dist`: the layer x rank grid lands in one self-contained page."""
from html.parser import HTMLParser

from fusecheck.cli.main import main


def test_dist_writes_its_html_page(tmp_path):
    page = tmp_path / "sub" / "d.html"
    assert main(["dist", "kernels/ag_gemm.py:AllGatherGemm", "--world-size", "2", "--html", str(page), "-q"]) == 0
    text = page.read_text()
    tags = []
    parser = HTMLParser()
    parser.handle_starttag = lambda tag, attrs: tags.append(tag)
    parser.feed(text)
    assert "table" in tags and "script" not in tags and "http" not in text.replace("http-equiv", "")
    assert "rank" in text and "PASS" in text
