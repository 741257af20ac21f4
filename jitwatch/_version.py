"""The jitwatch version, in a module of its own so every layer can read it without importing the
package root (which imports the worker API and, through it, every layer)."""

__version__ = "0.3.0.dev0"
