# Quick start: `make demo` (set up + main job), `make test` (set up + test suite).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# offscreen MuJoCo rendering (EGL); libusb for pyrealsense2, hidapi for pyspacemouse; iproute2 for the
# network namespace franka-sim runs in (its ports are fixed).
SYSTEM_LIBS := libegl1 libegl-mesa0 libgl1-mesa-dri libgles2 libusb-1.0-0 libhidapi-hidraw0 iproute2
# franka-sim pins numpy 1.26 and mujoco<3.3, so it gets its own venv (DESIGN.md).
FRANKA_SIM_VENV := .venv-franka-sim
# LeRobot, to check with its own loader that it reads our datasets (tests/interop). It pins torch<2.11, whose only
# x86_64 build on PyPI is the CUDA one (runs on the CPU; ~8 GB venv, ~2.5 min to install), so it gets its own venv,
# rebuilt only when these pins change. Its torchcodec decodes video with Debian's FFmpeg 5.1 libraries.
LEROBOT_VENV := .venv-lerobot
LEROBOT_PINS := lerobot==0.4.4 torch==2.10.0 torchvision==0.25.0 torchcodec==0.10.0
LEROBOT_DISK_GB := 10  # the venv takes 8.3 GB: refuse early, by name, rather than fail mid-install with ENOSPC
LEROBOT_STAMP := $(LEROBOT_VENV)/.installed-$(shell echo '$(LEROBOT_PINS)' | sha1sum | cut -c1-12)
FFMPEG_LIBS := libavcodec59 libavformat59 libavutil57 libavdevice59 libavfilter8 libswscale6 libswresample4
# apt-get install of the packages in $(1) that are missing (as root, or through sudo)
apt_install = if command -v apt-get >/dev/null && ! dpkg -s $(1) >/dev/null 2>&1; then \
	  echo "installing system libraries: $(1)"; \
	  if [ "$$(id -u)" = 0 ]; then apt-get install -y -q $(1) >/dev/null || \
	    (apt-get update -q && apt-get install -y -q $(1) >/dev/null); \
	  else sudo apt-get install -y -q $(1); fi; fi

.PHONY: setup setup-lerobot demo demo-quick test test-slow lint bench bench-distill clean

$(STAMP): pyproject.toml
	@$(call apt_install,$(SYSTEM_LIBS))
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first and pinned: the CPU build; an unpinned torch would pull a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[dev]"
	test -d $(FRANKA_SIM_VENV) || $(PY) -m venv $(FRANKA_SIM_VENV)
	$(FRANKA_SIM_VENV)/bin/pip install -q franka-sim==1.1.7
	touch $(STAMP)

setup: $(STAMP)

$(LEROBOT_STAMP):
	@$(call apt_install,$(FFMPEG_LIBS))
	rm -rf $(LEROBOT_VENV)
	@free=$$(df -Pk . | awk 'NR==2 {print int($$4 / 1048576)}'); if [ "$$free" -lt $(LEROBOT_DISK_GB) ]; then \
	  echo "LeRobot's venv needs ~$(LEROBOT_DISK_GB) GB of disk, $$free GB free here: free some (old clones, runs/)" >&2; \
	  exit 1; fi
	$(PY) -m venv $(LEROBOT_VENV)
	$(LEROBOT_VENV)/bin/pip install -q --upgrade pip
	$(LEROBOT_VENV)/bin/pip install -q $(LEROBOT_PINS)
	touch $@

setup-lerobot: $(LEROBOT_STAMP)

demo: setup
	$(BIN)/reflexlab demo

demo-quick: setup
	$(BIN)/reflexlab demo --quick --run-dir runs/demo-quick

test: setup setup-lerobot
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/pytest -n 2 -q -m "not slow and not realtime"
	$(BIN)/pytest -q -m "realtime and not slow"

test-slow: setup
	$(BIN)/pytest -q -m slow

lint: setup
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/lint-imports

bench: setup
	$(BIN)/reflexlab bench sim

# demos -> diffusion teacher -> consistency (+ one DAgger round) and MeanFlow students -> the distillation table
# (~45 min on 2 cores before DAgger; the round adds a rollout, the teacher's labels and up to 10 min of training)
bench-distill: setup
	$(BIN)/reflexlab bench distill --work-dir runs/panda-push-t --teacher-time-budget-s 840 --student-time-budget-s 600

clean:
	rm -rf $(VENV) $(FRANKA_SIM_VENV) $(LEROBOT_VENV) runs .pytest_cache
