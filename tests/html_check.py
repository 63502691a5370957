"""Structure check of an HTML report page with the standard library's html.parser (what CI can afford)."""
from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {"meta", "br", "img", "input", "link", "hr", "wbr", "col", "area", "base", "source", "track"}
SVG_VOID = {"line", "circle", "rect", "polyline", "path", "polygon", "ellipse"}


@dataclass
class PageInfo:
    svgs: int = 0
    tables: int = 0
    text: str = ""
    tags: list = field(default_factory=list)


class _Parser(HTMLParser):
    def __init__(self):
        super().__init__()
        self.stack, self.info, self.texts = [], PageInfo(), []

    def handle_starttag(self, tag, attrs):
        self.info.tags.append(tag)
        for name, value in attrs:
            assert not name.startswith("on"), f"inline script handler {name}"
            assert not (value or "").startswith(("http:", "https:", "//")), f"network reference {value}"
        assert tag not in ("script", "link", "iframe", "img"), f"<{tag}> in a self-contained report"
        self.info.svgs += tag == "svg"
        self.info.tables += tag == "table"
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.info.tags.append(tag)

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        assert self.stack, f"</{tag}> closes nothing"
        if tag in SVG_VOID and self.stack[-1] != tag:
            return
        assert self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1]}>"
        self.stack.pop()

    def handle_data(self, data):
        self.texts.append(data)


def parse_page(text: str) -> PageInfo:
    assert text.startswith("<!DOCTYPE html>")
    p = _Parser()
    p.feed(text)
    p.close()
    assert not p.stack, f"unclosed: {p.stack}"
    p.info.text = " ".join(p.texts)
    return p.info
