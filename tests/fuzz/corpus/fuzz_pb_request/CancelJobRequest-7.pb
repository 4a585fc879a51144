
abecause