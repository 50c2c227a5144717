"""The CQ4 format (docs/FORMAT.md): its constants, its files' layout, the
packed-panel and legacy index layouts, and malformed files for readers."""
