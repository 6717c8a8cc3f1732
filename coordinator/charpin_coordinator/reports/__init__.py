"""Coordinator side: every renderer of a drift report (text, Markdown, JSON, JUnit, HTML pages).

Imports flow one way, from the escaping helpers up to the pages and their CLI; nothing here
imports a module that imports it (tests/coordinator/test_reports_package.py checks it).
"""
