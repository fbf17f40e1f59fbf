# Typed stub of the cffi module built from csrc/ (csrc/native_api.h lists the C surface).
from typing import Any

ffi: Any
lib: Any
