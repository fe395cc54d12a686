"""Deployment: ONNX export and verification, inference runners, ROS 2 nodes, safety filter."""
