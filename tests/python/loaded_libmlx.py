"""Which libmlx a process mapped: what an install path leaves loaded.

Standard library only, so that it runs in a bare environment.
"""

import sys


def loaded_libmlx():
    """The libmlx this process mapped, from the loader's own record."""
    if sys.platform == "darwin":
        import ctypes

        dyld = ctypes.CDLL(None)
        dyld._dyld_get_image_name.restype = ctypes.c_char_p
        names = (dyld._dyld_get_image_name(i) for i in range(dyld._dyld_image_count()))
        return sorted({n.decode() for n in names if n.endswith(b"/libmlx.dylib")})
    with open("/proc/self/maps") as maps:
        paths = {l.split()[-1] for l in maps if l.rstrip().endswith("/libmlx.so")}
    return sorted(paths)
