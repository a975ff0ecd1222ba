"""prmkit.models"""
