"""ptexport-viewer: a PySide6 desktop viewer over ptexport (and perf) databases."""
