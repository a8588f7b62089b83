public enum GIOPlaceholder {}
