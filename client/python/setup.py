"""Only here to put kiln-torch.pth at the top of site-packages (pyproject.toml has the rest).

That file is one line which Python runs at start-up: when KILN_TORCH is set (and not "0") it
imports kiln._autoinstall, which plugs kiln into torch.compile's caches once torch imports
them. Unset, it costs one dictionary lookup. Editable installs do not get it.
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "kiln-torch.pth"


class BuildPyWithPth(build_py):
    def run(self) -> None:
        super().run()
        here = os.path.dirname(os.path.abspath(__file__))
        self.copy_file(os.path.join(here, "src", PTH), os.path.join(self.build_lib, PTH), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list:
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, PTH)]


setup(cmdclass={"build_py": BuildPyWithPth})
