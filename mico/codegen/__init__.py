"""C code generation: arena planning, packing, emission."""

from mico.codegen.planner import ArenaPlan, Buffer, plan_buffers, plan_graph
from mico.codegen.project import CProject, emit_c_project

__all__ = ["ArenaPlan", "Buffer", "CProject", "emit_c_project", "plan_buffers", "plan_graph"]
