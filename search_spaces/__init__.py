"""search_spaces"""
