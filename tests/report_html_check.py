#!/usr/bin/env python3
"""Reads a kvcal HTML report as a browser would, for tests/test_report.c.

Usage: python3 tests/report_html_check.py FILE.html

Parses FILE with html5lib in strict mode (any HTML5 parse error: a message
on stderr, exit 1) and prints, as JSON on stdout:
  figures   {id: {"cells": [{"value": data-value, "title": its <title>, and
            every other data-* attribute}], "gradients": linearGradients in
            its SVG, "svgs": SVG elements}} for every <figure id>
  tables    {id: [[cell text, ...] per <tbody> row]} for every <table id>
  warnings  [{"kind": data-kind, "text": text}] of <li class="warning">
  heading   {section id: its <h2> text}
  scripts   <script> elements
  external  src / href / xlink:href values that are not "#..." anchors
  csp       the content of the Content-Security-Policy <meta>, or null
Debian's python3-html5lib (make deps); the test says SKIPPED without it.
"""
import json
import sys

import html5lib


def local(tag):
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def text_of(el):
    return "".join(el.itertext()).strip()


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    parser = html5lib.HTMLParser(strict=True, namespaceHTMLElements=False)
    with open(sys.argv[1], "rb") as f:
        try:
            root = parser.parse(f)
        except html5lib.html5parser.ParseError as e:
            sys.exit("%s: not valid HTML5: %s" % (sys.argv[1], e))
    out = {"figures": {}, "tables": {}, "warnings": [], "heading": {}, "scripts": 0,
           "external": [], "csp": None}
    for el in root.iter():
        tag = local(el.tag)
        attrs = {local(k): v for k, v in el.attrib.items()}
        for key in ("src", "href"):
            if key in attrs and not attrs[key].startswith("#"):
                out["external"].append(attrs[key])
        if tag == "script":
            out["scripts"] += 1
        elif tag == "meta" and attrs.get("http-equiv", "").lower() == \
                "content-security-policy":
            out["csp"] = attrs.get("content")
        elif tag == "figure" and "id" in attrs:
            cells = []
            fig = {"cells": cells, "gradients": 0, "svgs": 0}
            for sub in el.iter():
                stag = local(sub.tag)
                sattrs = {local(k): v for k, v in sub.attrib.items()}
                if stag == "svg":
                    fig["svgs"] += 1
                elif stag == "linearGradient":
                    fig["gradients"] += 1
                elif "cell" in sattrs.get("class", "").split():
                    cell = {k[5:]: v for k, v in sattrs.items() if k.startswith("data-")}
                    cell["value"] = float(sattrs["data-value"])
                    titles = [t for t in sub if local(t.tag) == "title"]
                    cell["title"] = text_of(titles[0]) if titles else None
                    cells.append(cell)
            out["figures"][attrs["id"]] = fig
        elif tag == "table" and "id" in attrs:
            rows = []
            for body in (c for c in el if local(c.tag) == "tbody"):
                for tr in (c for c in body if local(c.tag) == "tr"):
                    rows.append([text_of(td) for td in tr if local(td.tag) in ("td", "th")])
            out["tables"][attrs["id"]] = rows
        elif tag == "li" and "warning" in attrs.get("class", "").split():
            out["warnings"].append({"kind": attrs.get("data-kind"), "text": text_of(el)})
        elif tag == "section" and "id" in attrs:
            h2 = [c for c in el if local(c.tag) == "h2"]
            out["heading"][attrs["id"]] = text_of(h2[0]) if h2 else ""
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
