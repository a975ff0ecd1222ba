"""prmkit.demo"""
