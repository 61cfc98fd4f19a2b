"""C code generation: lowering to C kernels, arena planning, packing, projects.

Seed 000's doors: :class:`MiCoCodeGen` and :class:`MiCoOpRegistry`.
"""

from mico.codegen.compile import CompiledModel, compile_model
from mico.codegen.micocodegen import MiCoCodeGen
from mico.codegen.planner import ArenaPlan, Buffer, plan_buffers, plan_graph
from mico.codegen.project import CProject, emit_c_project
from mico.codegen.registry import MiCoOpRegistry, UnregisteredOpError

__all__ = [
    "ArenaPlan",
    "Buffer",
    "CProject",
    "CompiledModel",
    "MiCoCodeGen",
    "MiCoOpRegistry",
    "UnregisteredOpError",
    "compile_model",
    "emit_c_project",
    "plan_buffers",
    "plan_graph",
]
