"""One module per ``peanchor`` sub-command; each exposes ``add_parser(subparsers)``.

Imports: nothing.
"""
