# The two commands of the README. Each sets itself up on first use (project-local venv).
# DISTRO=jazzy runs them on ROS 2 Jazzy (venv .venv-jazzy); Kilted is the default (.venv).
# With a sourced ROS 2, its rclpy is used (DISTRO, when given, must name that distro).
.PHONY: demo test bench setup clean

DISTRO ?=
ifeq ($(DISTRO),)
VENV ?= .venv
else ifeq ($(DISTRO),kilted)
VENV ?= .venv
else
VENV ?= .venv-$(DISTRO)
endif
PY := $(VENV)/bin/python
export ROS_AUTOMATIC_DISCOVERY_RANGE ?= LOCALHOST

setup:
	@SIMREAL_VENV=$(VENV) SIMREAL_DISTRO=$(DISTRO) scripts/bootstrap.sh

demo: setup
	@$(PY) -m simreal_ros.client.demo

test: setup
	@$(PY) -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build install log .pytest_cache .hypothesis
