"""torch 2.11's compile callbacks: start callbacks run when the first of nested compiles begins,
end callbacks when the last ends; each gets a CallbackArgs."""

import enum
import threading
from contextlib import contextmanager
from dataclasses import dataclass


class CallbackTrigger(enum.Enum):
    DYNAMO = 1
    LAZY_BACKWARD = 2


@dataclass
class CallbackArgs:
    callback_trigger: CallbackTrigger
    compile_id: str


class CompilationCallbackHandler:
    def __init__(self):
        self.start_callbacks = []
        self.end_callbacks = []
        self._depth = 0
        self._lock = threading.Lock()

    def register_start_callback(self, callback):
        self.start_callbacks.append(callback)
        return callback

    def register_end_callback(self, callback):
        self.end_callbacks.append(callback)
        return callback

    @contextmanager
    def install_callbacks(self, trigger, compile_id):
        args = CallbackArgs(trigger, compile_id)
        with self._lock:
            self._depth += 1
            if self._depth == 1:
                for cb in self.start_callbacks:
                    cb(args)
        try:
            yield
        finally:
            with self._lock:
                if self._depth == 1:
                    for cb in self.end_callbacks:
                        cb(args)
                self._depth -= 1

    def clear(self):
        self.start_callbacks.clear()
        self.end_callbacks.clear()


callback_handler = CompilationCallbackHandler()


def on_compile_start(callback):
    return callback_handler.register_start_callback(callback)


def on_compile_end(callback):
    return callback_handler.register_end_callback(callback)
