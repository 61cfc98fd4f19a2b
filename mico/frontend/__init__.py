"""torch -> IR."""

from mico.frontend.export import NodeInfo, export_graph

__all__ = ["NodeInfo", "export_graph"]
