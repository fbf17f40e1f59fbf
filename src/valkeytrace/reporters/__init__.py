"""Renderers of analysed recordings: text (rich), markdown, json, csv."""
