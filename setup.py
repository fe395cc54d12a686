"""ament_python packaging: what colcon installs besides the Python packages (metadata lives in pyproject.toml).

A robot workspace needs the ament resource-index marker, package.xml, the launch files with
their parameter YAML and the robot configs under ``share/reflexlab``; setup.cfg puts the node
executables under ``lib/reflexlab`` where ``ros2 run`` and ``ros2 launch`` look.
"""

from glob import glob

from setuptools import setup

setup(
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/reflexlab"]),
        ("share/reflexlab", ["package.xml"]),
        ("share/reflexlab/launch", glob("launch/*.launch.xml")),
        ("share/reflexlab/launch/params", glob("launch/params/*.yaml")),
        ("share/reflexlab/config/robots", glob("config/robots/*.yaml")),
        ("share/reflexlab/config/teleop", glob("config/teleop/*.yaml")),
    ]
)
