"""Sphinx configuration of Strom's documentation site (`strom docs` builds and serves it).

The pages are Markdown (MyST). Reference pages are generated at build time from the code's own
registries by the `strom-reference` directive (`strom.tools.docs_reference`), the `strom`
command's reference by sphinx-click, and the `strom.testing` API by autodoc.
"""

from __future__ import annotations

project = "Strom"
author = "the Strom authors"
copyright = "the Strom authors, Apache-2.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx_click",
    "strom.tools.docs_reference",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "**/results/**", "README.md"]

# MyST: ::: fences for admonitions, definition lists (the configuration reference),
# heading anchors for links like page.md#section
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# autodoc (reference/testing-api.md): signatures as written, members in source order
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
# With -n (nitpicky) every cross-reference must resolve; there is no network here for
# intersphinx, so names outside strom (the standard library's, trio's) are not linked.
nitpick_ignore_regex = [(r"py:.*", r"(?!strom\.).*")]

html_theme = "furo"
html_title = "Strom"
html_static_path = ["_static"]
html_css_files = ["strom.css"]
html_show_sourcelink = False
# the pages' own headings are enough; Furo's "edit this page" would need a repository URL
html_theme_options = {"navigation_with_keys": True}

linkcheck_anchors = True
