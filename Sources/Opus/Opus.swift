import COpus
