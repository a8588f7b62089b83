import CSodium
