"""prmkit.data"""
