# SPDX-License-Identifier: MIT
"""The package's version: the Makefile's VERSION, which kvmemd, kvmemctl
and libkvmem's file name carry too (python/tests/test_kvmem.py checks
that they agree). pyproject.toml reads it from here without importing the
package."""

__version__ = "0.1.0"
