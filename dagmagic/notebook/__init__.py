"""The notebook layer: magics, input transformer, widget and static fallbacks."""
