print("peervoicectl")
