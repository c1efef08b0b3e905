"""A node hands the C heap's free memory back to the system on a timer (``services.node.trim_memory``,
``$JOINLIB_MALLOC_TRIM_S``): the thread trims until the node stops, 0 turns it off, a bad value is an error line."""
from __future__ import annotations

import ctypes.util
import threading

import pytest

from joinlib.errors import ClusterError
from joinlib.settings import MALLOC_TRIM_S, NodeSettings
from services.node.__main__ import main, trim_memory


def test_the_trim_thread_runs_until_the_node_stops():
    assert ctypes.util.find_library("c") is not None   # glibc, as on the services image and CI
    stop = threading.Event()
    thread = trim_memory(0.01, stop)
    assert thread is not None and thread.daemon and thread.is_alive()
    stop.set()
    thread.join(5)
    assert not thread.is_alive()


def test_zero_seconds_is_never():
    assert trim_memory(0, threading.Event()) is None


def test_the_setting():
    assert NodeSettings.from_env({}).trim_every_s == MALLOC_TRIM_S
    assert NodeSettings.from_env({"JOINLIB_MALLOC_TRIM_S": "2.5"}).trim_every_s == 2.5
    assert NodeSettings.from_env({"JOINLIB_MALLOC_TRIM_S": "0"}).trim_every_s == 0
    for bad in ("-1", "soon", "nan", "inf"):
        with pytest.raises(ClusterError, match="JOINLIB_MALLOC_TRIM_S"):
            _ = NodeSettings.from_env({"JOINLIB_MALLOC_TRIM_S": bad}).trim_every_s


def test_a_bad_setting_is_one_error_line(monkeypatch, capsys):
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "localhost:1")
    monkeypatch.setenv("JOINLIB_MALLOC_TRIM_S", "soon")
    assert main(["--site", "s1"]) == 2
    err = capsys.readouterr().err
    assert "JOINLIB_MALLOC_TRIM_S='soon'" in err and "Traceback" not in err
