"""joinlib: distributed sliding-window joins with semijoins (Tran & Lee 2010) and beyond."""
__version__ = "0.1.0"
