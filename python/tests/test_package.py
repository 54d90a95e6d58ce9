# SPDX-License-Identifier: MIT
"""The package as a package: its version, and how it finds libkvmem.

Each way of finding the library is tried in a python3 of its own, on a
copy of the package outside the source tree (so that build/ is not next
to it), with the environment that way needs and no other.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import kvmem

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BUILD = os.path.abspath(os.environ.get("KVMEM_BUILD", os.path.join(ROOT, "build")))
PACKAGE = os.path.join(ROOT, "python", "kvmem")


def makefile_version():
    with open(os.path.join(ROOT, "Makefile")) as f:
        m = re.search(r"^VERSION := (\S+)$", f.read(), re.M)
    return m.group(1)


class Version(unittest.TestCase):
    def test_version_is_the_makefiles(self):
        """kvmem.__version__ (the package's metadata version too) is the
        Makefile's VERSION, which the library's file name and kvmemctl
        carry."""
        v = makefile_version()
        self.assertEqual(kvmem.__version__, v)
        self.assertEqual(kvmem.library_version, v)
        if os.environ.get("KVMEM_VERSION"):
            self.assertEqual(kvmem.__version__, os.environ["KVMEM_VERSION"])
        real = os.path.realpath(kvmem.library_path)
        if os.path.isabs(kvmem.library_path):
            self.assertEqual(os.path.basename(real), "libkvmem.so." + v)
        ctl = os.path.join(BUILD, "tools", "kvmemctl")
        if os.access(ctl, os.X_OK):
            out = subprocess.run(
                [ctl, "--version"], stdout=subprocess.PIPE, check=True
            ).stdout.decode()
            self.assertEqual(out.split()[:2], ["kvmemctl", v])


class TypeHints(unittest.TestCase):
    def test_mypy_accepts_the_package(self):
        """The hints of the public API (py.typed) agree with the code, as
        mypy reads them, where mypy is installed (Debian: mypy). NumPy and
        PyTorch are not followed (a minute of mypy's time): their types
        are Any here; without --follow-imports=skip it passes too."""
        try:
            import mypy  # noqa: F401
        except ImportError:
            self.skipTest("no mypy (Debian: mypy)")
        self.assertTrue(os.path.exists(os.path.join(PACKAGE, "py.typed")))
        r = subprocess.run(
            [sys.executable, "-m", "mypy", "--cache-dir=/dev/null",
             "--ignore-missing-imports", "--follow-imports=skip", "kvmem"],
            cwd=os.path.join(ROOT, "python"),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self.assertEqual(r.returncode, 0, r.stdout.decode())


class FindLibrary(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kvmem-pkg-", dir=os.environ.get("TMPDIR"))
        # site/lib/kvmem: the source tree's build/ would be site/build
        cls.site = os.path.join(cls.dir, "site", "lib")
        shutil.copytree(
            PACKAGE,
            os.path.join(cls.site, "kvmem"),
            ignore=shutil.ignore_patterns("__pycache__", "_install.py"),
        )
        # a pkg-config that knows nothing, and one that knows kvmem.pc
        cls.no_pc = os.path.join(cls.dir, "no-pkg-config")
        cls.pc = os.path.join(cls.dir, "pkg-config")
        for path, body in (
            (cls.no_pc, "exit 1\n"),
            (cls.pc, 'test "$*" = "--variable=libdir kvmem" && echo %s\n' % BUILD),
        ):
            with open(path, "w") as f:
                f.write("#!/bin/sh\n" + body)
            os.chmod(path, 0o755)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir)

    def run_python(self, code, **env):
        """@code in a python3 of the copy, with only @env's library hints."""
        e = {
            k: v
            for k, v in os.environ.items()
            if k not in ("KVMEM_LIB", "LD_LIBRARY_PATH", "PYTHONPATH")
        }
        e.update(PYTHONPATH=self.site, PKG_CONFIG=self.no_pc)
        e.update(env)
        return subprocess.run(
            [sys.executable, "-c", code],
            env=e,
            cwd=self.dir,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )

    def loaded_by_loader(self):
        r = self.run_python("import ctypes; ctypes.CDLL('libkvmem.so.0')")
        return r.returncode == 0

    def test_kvmem_lib_that_is_not_there(self):
        """KVMEM_LIB naming nothing: an ImportError naming it and what to
        do, not an OSError, and no other library in its place."""
        r = self.run_python(
            "import kvmem",
            KVMEM_LIB="/nonexistent/libkvmem.so",
            LD_LIBRARY_PATH=BUILD,
        )
        out = r.stdout.decode()
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("ImportError: kvmem: libkvmem could not be loaded", out)
        self.assertIn("$KVMEM_LIB: /nonexistent/libkvmem.so: no such file", out)
        self.assertNotIn("dynamic loader", out)
        for what in ("make", "KVMEM_LIB", "make install"):
            self.assertIn(what, out)

    def test_no_library_anywhere(self):
        """Nothing in any place: each place tried is in the message."""
        if self.loaded_by_loader():
            self.skipTest("a libkvmem.so.0 is installed on the loader's path")
        r = self.run_python("import kvmem")
        out = r.stdout.decode()
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("ImportError: kvmem: libkvmem could not be loaded", out)
        self.assertIn(
            "the source tree's build: %s: no such file"
            % os.path.join(self.dir, "site", "build", "libkvmem.so"),
            out,
        )
        self.assertIn("the dynamic loader's path: libkvmem.so.0: ", out)
        self.assertIn("pkg-config --variable=libdir kvmem: kvmem.pc not found", out)
        self.assertNotIn("OSError", out)

    def test_found_on_the_loaders_path(self):
        r = self.run_python(
            "import kvmem; print(kvmem.library_path)", LD_LIBRARY_PATH=BUILD
        )
        self.assertEqual(r.returncode, 0, r.stdout.decode())
        self.assertEqual(r.stdout.decode().strip(), "libkvmem.so.0")

    def test_found_through_pkg_config(self):
        if self.loaded_by_loader():
            self.skipTest("a libkvmem.so.0 is installed on the loader's path")
        r = self.run_python(
            "import kvmem; print(kvmem.library_path)", PKG_CONFIG=self.pc
        )
        self.assertEqual(r.returncode, 0, r.stdout.decode())
        self.assertEqual(
            r.stdout.decode().strip(), os.path.join(BUILD, "libkvmem.so.0")
        )

    def test_found_in_the_install_libdir(self):
        """make install writes kvmem/_install.py with its LIBDIR."""
        if self.loaded_by_loader():
            self.skipTest("a libkvmem.so.0 is installed on the loader's path")
        inst = os.path.join(self.site, "kvmem", "_install.py")
        with open(inst, "w") as f:
            f.write("LIBDIR = %r\n" % BUILD)
        try:
            r = self.run_python("import kvmem; print(kvmem.library_path)")
        finally:
            os.unlink(inst)
        self.assertEqual(r.returncode, 0, r.stdout.decode())
        self.assertEqual(
            r.stdout.decode().strip(), os.path.join(BUILD, "libkvmem.so.0")
        )


if __name__ == "__main__":
    unittest.main()
