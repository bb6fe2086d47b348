"""Shared fixtures. Real-component tests share one Ray cluster per session."""

from __future__ import annotations
